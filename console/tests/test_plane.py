"""Roles, audit log, health, OpenAPI and the error format of the management plane."""
import json

import pytest
from django.core.management import call_command
from django.test import Client
from drf_spectacular.drainage import GENERATOR_STATS

from plane.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_health_answers_without_auth_with_each_component(data_dir):
    r = Client().get("/api/v1/health")
    assert r.status_code == 200
    body = r.json()
    assert body["components"]["database"]["state"] == "ok"
    assert body["components"]["redis"]["state"] == "ok"
    assert body["components"]["worker"]["state"] in ("ok", "error")  # no worker in this test
    assert "pools" in body


def test_api_needs_a_token():
    r = Client().get("/api/v1/pools/")
    assert r.status_code in (401, 403)
    assert r.json()["error"] in ("not_authenticated", "authentication_failed")


def test_viewer_reads_but_cannot_change_and_is_audited(viewer_api):
    assert viewer_api.get("/api/v1/pools/").status_code == 200
    r = viewer_api.post("/api/v1/filesystems/", {"name": "x"}, format="json")
    assert r.status_code == 403 and r.json()["error"] == "permission_denied"
    event = AuditEvent.objects.get()
    assert (event.username, event.method, event.result) == ("viewer", "POST", "denied")
    assert event.path == "/api/v1/filesystems/"


def test_only_admins_manage_users(api, operator_api):
    r = operator_api.post("/api/v1/users/", {"username": "eve", "password": "secret-pw-1",
                                             "role": "admin"}, format="json")
    assert r.status_code == 403
    r = api.post("/api/v1/users/", {"username": "bob", "password": "secret-pw-1",
                                    "role": "operator"}, format="json")
    assert r.status_code == 201 and r.json()["role"] == "operator"
    assert "password" not in r.json()
    audit = api.get("/api/v1/audit/?username=admin").json()["results"]
    assert audit[0]["detail"]["request"]["password"] == "***"
    assert audit[0]["result"] == "ok"


def test_validation_errors_are_json_with_fields(api):
    r = api.post("/api/v1/filesystems/", {"name": "-bad-"}, format="json")
    assert r.status_code == 400
    body = r.json()
    assert body["error"] == "invalid" and "name" in body["fields"] and body["detail"]


def test_openapi_schema_describes_every_resource(api):
    r = api.get("/api/v1/schema/?format=json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    for p in ("/api/v1/pools/", "/api/v1/filesystems/", "/api/v1/volumes/",
              "/api/v1/snapshots/", "/api/v1/jobs/{id}/", "/api/v1/audit/",
              "/api/v1/pools/{name}/scrub/", "/api/v1/volumes/{name}/resize/"):
        assert p in paths
    assert api.get("/api/v1/docs/").status_code == 200


def test_openapi_schema_generates_without_warnings_or_errors(api, tmp_path, capsys):
    """REST automation generates clients from the schema: every view is described, no guesses."""
    out = tmp_path / "schema.json"
    # --fail-on-warn raises on any warning or error; --validate checks it against the OpenAPI spec.
    call_command("spectacular", "--fail-on-warn", "--validate", "--format", "openapi-json",
                 "--file", str(out))
    assert not GENERATOR_STATS._warn_cache and not GENERATOR_STATS._error_cache
    assert "Warning" not in capsys.readouterr().err
    schema = json.loads(out.read_text())
    paths = schema["paths"]
    # One operation for health (the slash alias still answers, see below), the views that had
    # no serializer are described, and /me is one object, not a page of users.
    assert "/api/v1/health" in paths and "/api/v1/health/" not in paths
    assert "text/plain" in paths["/metrics"]["get"]["responses"]["200"]["content"]
    series = paths["/api/v1/metrics/series/"]["get"]["responses"]["200"]["content"]
    assert series["application/json"]["schema"]["$ref"].endswith("/MetricSeries")
    me = paths["/api/v1/me/"]["get"]["responses"]["200"]["content"]["application/json"]
    assert me["schema"]["$ref"].endswith("/Me")
    assert set(schema["components"]["schemas"]["Me"]["properties"]) == {"username", "role"}
    enums = schema["components"]["schemas"]
    assert {"JobStateEnum", "StorageStateEnum", "ShareStateEnum"} <= set(enums)
    assert Client().get("/api/v1/health/").status_code == 200
    assert api.get("/api/v1/me/").json() == {"username": "admin", "role": "admin"}
