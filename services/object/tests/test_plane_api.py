"""The object service's REST API against a real gateway started the way `strata up` starts it,
checked with boto3: buckets, keys (secret shown once, revocation), quotas, delete refusals,
bucket policies and CORS rules (also from the CLI)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests
from botocore.exceptions import ClientError
from django.contrib.auth.models import User

from plane.models import AuditEvent
from services.object import bootstrap, gatewayconf, service
from services.object.models import Gateway, S3Key
from services.object.tasks import reconcile_buckets
from services.object.tests.planefixture import plane, s3_client  # noqa: F401 (plane: a fixture)
from services.storage.models import Pool

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]


def _code(exc_info) -> str:
    return exc_info.value.response["Error"]["Code"]


def test_bootstrap_gives_admin_credentials_and_a_data_root_on_the_pool(plane, api, data_dir):

    gw = Gateway.objects.get()
    assert gw.filesystem.name == "s3" and gw.filesystem.pool.name == "default"
    config_file = data_dir / "run" / "s3" / "gateway.json"
    config = json.loads(config_file.read_text())
    assert config["data_root"].startswith(gw.filesystem.path)
    assert stat.S_IMODE(os.stat(config_file).st_mode) == 0o600
    assert config["users"][plane.creds["s3_access_key"]]["admin"] is True
    assert plane.admin_s3.list_buckets()["Buckets"] == []
    refused = api.delete("/api/v1/filesystems/s3/")
    assert refused.status_code == 409 and "S3 gateway" in refused.json()["detail"]
    # the plane's own key (checkpoint verification over S3) works and cannot be deleted

    own = service.plane_s3_config()
    assert s3_client(own["endpoint"], own["access_key"], own["secret_key"]).list_buckets()
    refused = api.delete(f"/api/v1/s3-keys/{own['access_key']}/")
    assert refused.status_code == 409
    # a second bootstrap (next `strata up`) keeps the same key

    again = bootstrap.bootstrap({"username": "admin", **plane.creds})
    assert again["s3_access_key"] == plane.creds["s3_access_key"]
    assert again["s3_secret_key"] == plane.creds["s3_secret_key"]


def test_bucket_made_through_rest_is_served_with_usage_and_versioning(plane, api, client, live_server, tmp_path):
    made = api.post("/api/v1/buckets/", {"name": "ckpt-a"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["owner"] == "admin" and made.json()["pool"] == "default"
    assert "ckpt-a" in [b["Name"] for b in plane.admin_s3.list_buckets()["Buckets"]]
    plane.admin_s3.put_object(Bucket="ckpt-a", Key="shard-0", Body=b"x" * 1234)
    shown = api.get("/api/v1/buckets/ckpt-a/").json()
    assert (shown["used_bytes"], shown["used_objects"]) == (1234, 1)
    assert api.get("/api/v1/buckets/").json()["results"][0]["used_objects"] == 1
    patched = api.patch("/api/v1/buckets/ckpt-a/", {"versioning": "Enabled"}, format="json")
    assert patched.status_code == 200 and patched.json()["versioning"] == "Enabled"
    assert plane.admin_s3.get_bucket_versioning(Bucket="ckpt-a")["Status"] == "Enabled"
    back = api.patch("/api/v1/buckets/ckpt-a/", {"versioning": "Disabled"}, format="json")
    assert back.status_code == 400 and "versioning" in back.json()["fields"]
    bad = api.post("/api/v1/buckets/", {"name": "Bad_Name"}, format="json")
    assert bad.status_code == 400 and "name" in bad.json()["fields"]
    dup = api.post("/api/v1/buckets/", {"name": "ckpt-a"}, format="json")
    assert dup.status_code == 409 and dup.json()["error"] == "exists"  # a name already taken

    # the console pages

    assert api.post("/api/v1/buckets/", {"name": "shown-bkt"}, format="json").status_code == 201
    made = api.post("/api/v1/s3-keys/", {"description": "for the page"}, format="json").json()
    assert made["show_once"]["secret_key"] == made["secret_key"]
    client.force_login(User.objects.get(username="admin"))
    page = client.get("/console/buckets/").content.decode()
    assert "shown-bkt" in page and 'data-url="/api/v1/buckets/"' in page
    page = client.get("/console/s3-keys/").content.decode()
    assert made["access_key"] in page and made["secret_key"] not in page

    # a bucket's policy and CORS rules (one gateway for both checks)
    _policy_and_cors_through_api_cli_and_s3(plane, api, live_server, tmp_path)


def _policy_and_cors_through_api_cli_and_s3(plane, api, live_server, tmp_path):
    """Shown in the bucket's detail whether set over S3 or through the REST API, set and
    deleted from the API and the CLI (validated as S3 does: a malformed policy is a 400 naming
    the reason), recorded in the audit log."""
    assert api.post("/api/v1/buckets/", {"name": "web"}, format="json").status_code == 201
    shown = api.get("/api/v1/buckets/web/").json()
    assert shown["policy"] is None and shown["cors"] is None
    # set over S3: shown by the plane
    policy = {"Version": "2012-10-17", "Statement": [{"Sid": "read", "Effect": "Allow", "Principal": "*",
                                                      "Action": "s3:GetObject", "Resource": "arn:aws:s3:::web/*"}]}
    plane.admin_s3.put_bucket_policy(Bucket="web", Policy=json.dumps(policy))
    assert api.get("/api/v1/buckets/web/").json()["policy"] == policy
    # set through the API: served over S3, and audited
    rules = [{"AllowedOrigins": ["https://app.example.com"], "AllowedMethods": ["GET", "PUT"],
              "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 300}]
    put = api.put("/api/v1/buckets/web/cors/", {"rules": rules}, format="json")
    assert put.status_code == 200 and put.json()["rules"] == rules, put.content
    assert plane.admin_s3.get_bucket_cors(Bucket="web")["CORSRules"] == rules
    r = requests.options(f"{plane.endpoint}/web/x", headers={"Origin": "https://app.example.com",
                                                            "Access-Control-Request-Method": "PUT"})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert AuditEvent.objects.filter(method="PUT", path="/api/v1/buckets/web/cors/", status_code=200).exists()
    bad = api.put("/api/v1/buckets/web/cors/", {"rules": [{"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}]},
                  format="json")
    assert bad.status_code == 400 and "Unsupported method is PATCH" in bad.json()["detail"]
    bad = api.put("/api/v1/buckets/web/policy/", {"policy": {"Statement": [dict(policy["Statement"][0],
                                                                                Action="s3:Nope")]}}, format="json")
    assert bad.status_code == 400 and "Policy has invalid action" in bad.json()["detail"], bad.content
    assert api.get("/api/v1/buckets/web/policy/").json()["policy"] == policy
    assert api.delete("/api/v1/buckets/web/cors/").status_code == 204
    with pytest.raises(ClientError) as e:
        plane.admin_s3.get_bucket_cors(Bucket="web")
    assert e.value.response["Error"]["Code"] == "NoSuchCORSConfiguration"
    assert api.get("/api/v1/buckets/nope/policy/").status_code == 404

    # the CLI
    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/",
           "STRATA_TOKEN": api.token, "PYTHONPATH": str(ROOT)}

    def strata(*args, stdin=None):
        return subprocess.run([sys.executable, "-m", "console.cli.main", *args], env=env, cwd=ROOT, input=stdin,
                              capture_output=True, text=True, timeout=120)

    deny = {"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject",
                           "Resource": "arn:aws:s3:::web/*"}]}
    (tmp_path / "p.json").write_text(json.dumps(deny))
    r = strata("bucket", "policy", "set", "web", str(tmp_path / "p.json"))
    assert r.returncode == 0, r.stderr
    assert json.loads(strata("bucket", "policy", "get", "web").stdout) == deny
    assert json.loads(plane.admin_s3.get_bucket_policy(Bucket="web")["Policy"]) == deny
    r = strata("bucket", "cors", "set", "web", "-", stdin=json.dumps({"CORSRules": rules}))
    assert r.returncode == 0 and json.loads(r.stdout) == rules, r.stderr
    r = strata("bucket", "policy", "set", "web", "-", stdin="{not json")
    assert r.returncode == 1 and r.stderr.strip().startswith("strata:") and len(r.stderr.strip().splitlines()) == 1
    r = strata("bucket", "policy", "set", "web", "-", stdin='{"Statement": []}')
    assert r.returncode == 1 and "Missing required field Statement" in r.stderr
    assert strata("bucket", "policy", "delete", "web").returncode == 0
    assert json.loads(strata("bucket", "policy", "get", "web").stdout) is None
    shown = api.get("/api/v1/buckets/web/").json()
    assert shown["policy"] is None and shown["cors"] == rules


def test_key_works_secret_never_listed_and_revocation(plane, api, operator_api, viewer_api, data_dir):
    made = api.post("/api/v1/s3-keys/", {"user": "alice", "description": "trainer"}, format="json")
    assert made.status_code == 201, made.content
    access, secret = made.json()["access_key"], made.json()["secret_key"]
    assert made.json()["endpoint"] == plane.endpoint
    alice = s3_client(plane.endpoint, access, secret)
    alice.create_bucket(Bucket="alice-bkt")
    alice.put_object(Bucket="alice-bkt", Key="k", Body=b"hello")
    assert alice.get_object(Bucket="alice-bkt", Key="k")["Body"].read() == b"hello"
    for url in ("/api/v1/s3-keys/", f"/api/v1/s3-keys/{access}/", "/api/v1/s3-keys/?user=alice"):
        got = api.get(url)
        assert got.status_code == 200 and secret not in got.content.decode()
        assert "secret" not in got.content.decode()

    assert secret not in S3Key.objects.get(access_key=access).sealed_secret
    # buckets made over S3 are imported by the reconcile task (and by listings)

    assert reconcile_buckets()["imported"] == ["alice-bkt"]
    alice.create_bucket(Bucket="alice-two")
    assert "alice-two" in [b["name"] for b in api.get("/api/v1/buckets/").json()["results"]]
    assert api.get("/api/v1/buckets/alice-bkt/").json()["owner"] == "alice"
    assert api.delete(f"/api/v1/s3-keys/{access}/").status_code == 204
    with pytest.raises(ClientError) as e:
        alice.list_objects_v2(Bucket="alice-bkt")
    assert _code(e) == "InvalidAccessKeyId"
    assert access not in json.loads((data_dir / "run" / "s3" / "gateway.json").read_text())["users"]

    # a secret of one's own; role rules
    mine = "my-own-secret-of-some-length"
    made = api.post("/api/v1/s3-keys/", {"secret_key": mine}, format="json")
    assert made.status_code == 201 and made.json()["secret_key"] == mine
    s3 = s3_client(plane.endpoint, made.json()["access_key"], mine)
    assert s3.list_buckets()["Buckets"] == []
    assert viewer_api.post("/api/v1/s3-keys/", {}, format="json").status_code == 403
    refused = operator_api.post("/api/v1/s3-keys/", {"admin": True}, format="json")
    assert refused.status_code == 400
    ok = operator_api.post("/api/v1/s3-keys/", {}, format="json")
    assert ok.status_code == 201 and ok.json()["user"] == "operator" and not ok.json()["admin"]
    assert viewer_api.get("/api/v1/s3-keys/").status_code == 200


def test_delete_refused_while_not_empty(plane, api):
    assert api.post("/api/v1/buckets/", {"name": "full"}, format="json").status_code == 201
    plane.admin_s3.put_object(Bucket="full", Key="obj", Body=b"data")
    refused = api.delete("/api/v1/buckets/full/")
    assert refused.status_code == 409
    assert refused.json()["error"] == "BucketNotEmpty" and "not empty" in refused.json()["detail"]
    assert api.get("/api/v1/buckets/full/").status_code == 200
    plane.admin_s3.delete_object(Bucket="full", Key="obj")
    assert api.delete("/api/v1/buckets/full/").status_code == 204
    with pytest.raises(ClientError) as e:
        plane.admin_s3.head_bucket(Bucket="full")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_quota_set_through_rest_is_enforced(plane, api):
    name = f"q-{uuid.uuid4().hex[:8]}"
    made = api.post("/api/v1/buckets/", {"name": name, "quota_bytes": 1000}, format="json")
    assert made.status_code == 201, made.content
    s3 = plane.admin_s3
    s3.put_object(Bucket=name, Key="a", Body=b"x" * 600)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=name, Key="b", Body=b"x" * 600)
    assert _code(e) == "QuotaExceeded"
    patched = api.patch(f"/api/v1/buckets/{name}/", {"quota_bytes": None, "quota_objects": 2},
                        format="json")
    assert patched.status_code == 200, patched.content
    assert (patched.json()["quota_bytes"], patched.json()["quota_objects"]) == (None, 2)
    s3.put_object(Bucket=name, Key="b", Body=b"x" * 600)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=name, Key="c", Body=b"x")
    assert _code(e) == "QuotaExceeded"


def test_gateway_not_started_while_its_pool_is_offline(api, data_dir, settings):
    """An unmounted pool must not give the gateway an empty data root (buckets would vanish)."""

    settings.SERVICE_OPTIONS = {"s3_port": 1, "host": "127.0.0.1"}
    made = api.post("/api/v1/pools/", {"name": "default", "driver": "directory"}, format="json")
    assert made.status_code == 201, made.content
    assert bootstrap.ensure_gateway().filesystem.name == "s3"
    Pool.objects.filter(name="default").update(state="offline")
    creds = bootstrap.bootstrap({"username": "admin"})  # no gateway answers on port 1
    assert creds["s3_access_key"] and creds["s3_secret_key"]
    assert not gatewayconf.gate_path(data_dir).exists()
    assert creds["s3_access_key"] in gatewayconf.read_config(gatewayconf.config_path(data_dir))["users"]
