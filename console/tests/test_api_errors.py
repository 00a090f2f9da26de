"""A client's mistake is a 4xx with the JSON error body, never a 500 or an HTML page; the
plane refuses what would lock every admin out."""
import argparse

import pytest
from django.test import Client

from plane.cli.jobs import parse_size

pytestmark = pytest.mark.django_db

LISTS = ["pools", "volumes", "users", "buckets", "smb-shares", "audit", "jobs"]


@pytest.mark.parametrize("resource", LISTS)
@pytest.mark.parametrize("query,field", [
    ("limit=9223372036854775808", "limit"), ("limit=0", "limit"), ("limit=ten", "limit"),
    ("offset=-1", "offset"), ("offset=99999999999999999999", "offset"), ("offset=x", "offset"),
    ("limit=", "limit"), ("offset=", "offset"),
])
def test_out_of_range_or_mistyped_paging_is_a_400_naming_the_parameter(api, resource, query,
                                                                       field):
    r = api.get(f"/api/v1/{resource}/?{query}")
    assert r.status_code == 400, r.content
    assert r.json()["error"] == "invalid" and field in r.json()["fields"], r.json()


@pytest.mark.parametrize("resource,field,valid", [
    ("pools", "media", "flash"), ("pools", "state", "online"), ("volumes", "state", "online"),
    ("buckets", "versioning", "Enabled"), ("jobs", "state", "succeeded"),
    ("s3-keys", "admin", "false"),
])
def test_an_empty_filter_value_is_a_400_naming_it(api, resource, field, valid):
    # django-filter drops an empty filter, so `?state=` listed everything, where the API
    # documents one of the values (schemathesis found `?media=` answered 200)
    r = api.get(f"/api/v1/{resource}/?{field}=")
    assert r.status_code == 400, r.content
    assert r.json()["error"] == "invalid" and field in r.json()["fields"], r.json()
    assert api.get(f"/api/v1/{resource}/?{field}={valid}").status_code == 200


def test_a_boolean_filter_takes_true_or_false_only(api):
    r = api.get("/api/v1/s3-keys/?admin=maybe")
    assert r.status_code == 400 and "admin" in r.json()["fields"], r.content
    assert api.get("/api/v1/s3-keys/?admin=true").status_code == 200


@pytest.mark.parametrize("minutes", ["", "abc", "0", "121", "99999999999999999999"])
def test_metric_series_minutes_out_of_range_or_mistyped_is_a_400(api, minutes):
    r = api.get(f"/api/v1/metrics/series/?minutes={minutes}")
    assert r.status_code == 400 and "minutes" in r.json()["fields"], r.content
    assert api.get("/api/v1/metrics/series/?minutes=120").status_code == 200


def test_an_empty_name_filter_is_no_filter(api):
    api.post("/api/v1/users/", {"username": "u1", "password": "long-enough-1"}, format="json")
    assert api.get("/api/v1/audit/?username=").json()["count"] == \
        api.get("/api/v1/audit/").json()["count"] > 0


def test_paging_in_range_still_pages(api):
    for name in ("u1", "u2", "u3"):
        api.post("/api/v1/users/", {"username": name, "password": "long-enough-1"}, format="json")
    page = api.get("/api/v1/users/?limit=2&offset=1").json()
    assert page["count"] == 4 and len(page["results"]) == 2  # admin + 3


@pytest.mark.parametrize("method,path", [
    ("get", "/api/v1/no-such-thing/"), ("get", "/api/v2/pools/"),
    ("delete", "/api/v1/bucket-snapshots/%C2%84/"), ("get", "/api/v1/pools/x/y/z/"),
])
def test_unknown_api_urls_answer_json_404(api, method, path):
    r = getattr(api, method)(path)
    assert r.status_code == 404
    assert r["Content-Type"].startswith("application/json"), r.content[:200]
    assert r.json()["error"] == "not_found"


def test_pages_outside_the_api_keep_an_html_404():
    r = Client().get("/no-such-page/")
    assert r.status_code == 404 and not r["Content-Type"].startswith("application/json")


def test_an_admin_cannot_delete_itself_and_keeps_working(api):
    me = api.user.username
    r = api.delete(f"/api/v1/users/{me}/")
    assert r.status_code == 409 and r.json()["error"] == "conflict", r.content
    assert api.get("/api/v1/pools/").status_code == 200  # the token still works


def test_the_last_admin_cannot_be_demoted_or_deactivated(api):
    me = api.user.username
    for body, why in (({"role": "viewer"}, "last active admin"),
                      ({"is_active": False}, "deactivate your own account")):
        r = api.patch(f"/api/v1/users/{me}/", body, format="json")
        assert r.status_code == 409 and why in r.json()["detail"], r.content
    assert api.get("/api/v1/me/").json()["role"] == "admin"


def test_an_admin_cannot_deactivate_itself_even_with_another_admin(api):
    """Issue 34, medium 8: deactivating oneself cut one's own token at once."""
    api.post("/api/v1/users/", {"username": "root2", "password": "long-enough-1",
                                "role": "admin"}, format="json")
    me = api.user.username
    r = api.patch(f"/api/v1/users/{me}/", {"is_active": False}, format="json")
    assert r.status_code == 409 and r.json()["error"] == "conflict", r.content
    assert "deactivate your own account" in r.json()["detail"]
    assert api.get("/api/v1/me/").json()["role"] == "admin"  # the token still works
    # another admin may do it, and then the last one left cannot be deactivated by anyone
    r = api.patch("/api/v1/users/root2/", {"is_active": False}, format="json")
    assert r.status_code == 200 and r.json()["is_active"] is False
    r = api.patch(f"/api/v1/users/{me}/", {"role": "operator"}, format="json")
    assert r.status_code == 409 and "last active admin" in r.json()["detail"]


def test_an_admin_can_delete_another_admin_while_one_remains(api):
    api.post("/api/v1/users/", {"username": "root2", "password": "long-enough-1",
                                "role": "admin"}, format="json")
    assert api.delete("/api/v1/users/root2/").status_code == 204
    # and demoting works too once another admin exists
    api.post("/api/v1/users/", {"username": "root3", "password": "long-enough-1",
                                "role": "admin"}, format="json")
    assert api.patch("/api/v1/users/root3/", {"role": "operator"},
                     format="json").json()["role"] == "operator"


def test_a_name_already_taken_is_a_409_conflict(api):
    body = {"username": "dup", "password": "long-enough-1"}
    assert api.post("/api/v1/users/", body, format="json").status_code == 201
    r = api.post("/api/v1/users/", body, format="json")
    assert r.status_code == 409 and r.json()["error"] == "exists", r.content
    assert "username" in r.json()["fields"]


def test_cli_sizes_mean_what_their_unit_says():
    assert parse_size("512M") == parse_size("512MiB") == 512 * 2**20
    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("10G") == 10 * 2**30
    assert parse_size("4096") == 4096
    for bad in ("5XB", "-1G", "ten", "1.5.2G"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_size(bad)


@pytest.mark.parametrize("path,body,field", [
    ("/api/v1/buckets/", {"name": "q1", "quota_bytes": 99999999999999999999}, "quota_bytes"),
    ("/api/v1/buckets/", {"name": "q1", "quota_objects": 2**63}, "quota_objects"),
    ("/api/v1/volumes/", {"name": "v1", "size_bytes": 2**64}, "size_bytes"),
    ("/api/v1/filesystems/", {"name": "f1", "quota_bytes": 2**63}, "quota_bytes"),
    ("/api/v1/checkpoint-jobs/", {"name": "j1", "keep_last": 2**31}, "keep_last"),
])
def test_a_number_too_large_for_its_column_is_a_400_naming_the_field(api, path, body, field):
    r = api.post(path, body, format="json")
    assert r.status_code == 400, r.content
    assert field in r.json()["fields"], r.json()


def test_the_schema_declares_integer_bounds(api):
    schema = api.get("/api/v1/schema/?format=json").json()["components"]["schemas"]
    assert schema["BucketRequest"]["properties"]["quota_bytes"]["maximum"] == 2**63 - 1
    # a volume's size: the largest any driver serves (qemu's 2^63 - 2^30), from 1 MiB
    size = schema["VolumeRequest"]["properties"]["size_bytes"]
    assert (size["minimum"], size["maximum"]) == (2**20, 2**63 - 2**30)


def test_the_schema_types_the_checkpoint_manifest(api):
    schema = api.get("/api/v1/schema/?format=json").json()["components"]["schemas"]
    shard = schema["CommitRequest"]["properties"]["manifest"]["items"]
    assert shard["required"] == ["name", "size"]
    assert set(shard["properties"]) == {"name", "size", "sha256", "crc32c"}
