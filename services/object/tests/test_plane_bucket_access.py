"""A bucket's policy and CORS rules through the plane: shown in the bucket's detail whether set
over S3 or through the REST API, set and deleted from the API and the CLI (validated as S3
does: a malformed policy is a 400 naming the reason), recorded in the audit log."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from botocore.exceptions import ClientError
from rest_framework.authtoken.models import Token

from plane.models import AuditEvent
from services.object.tests.planefixture import start_plane_gateway, stop_procs

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def plane(api, data_dir, settings):
    started = start_plane_gateway(api, data_dir, settings)
    try:
        yield started
    finally:
        stop_procs(started.procs)


def test_policy_and_cors_through_api_cli_and_s3(plane, api, live_server, tmp_path):
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
           "STRATA_TOKEN": Token.objects.get(user=api.user).key, "PYTHONPATH": str(ROOT)}

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
