"""A bucket's access settings through the plane: the REST API shows and sets the canned ACL,
S3 Block Public Access and Object Ownership the gateway enforces; `strata bucket set-acl /
public-access / set-ownership` set them from a shell; the audit log records each change."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from django.contrib.auth.models import User

from plane.models import AuditEvent
from services.object.tests.planefixture import plane  # noqa: F401 (plane: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def strata(api, live_server):
    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/",
           "STRATA_TOKEN": api.token, "PYTHONPATH": str(ROOT)}

    def run(*args):
        done = subprocess.run([sys.executable, "-m", "console.cli.main", "--json", *args],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        return done.returncode, (json.loads(done.stdout) if done.returncode == 0 else done.stderr)
    return run


def test_access_settings_from_api_and_cli(plane, api, strata, client):
    made = api.post("/api/v1/buckets/", {"name": "site", "acl": "public-read"}, format="json")
    assert made.status_code == 201, made.content
    assert (made.json()["acl"], made.json()["public_access_block"], made.json()["object_ownership"]) == \
        ("public-read", None, "")
    plane.admin_s3.put_object(Bucket="site", Key="index.html", Body=b"<h1>hi</h1>", ACL="public-read")
    assert requests.get(f"{plane.endpoint}/site/index.html").content == b"<h1>hi</h1>"

    code, shown = strata("bucket", "public-access", "site", "all")
    assert code == 0, shown
    assert shown["public_access_block"] == {"BlockPublicAcls": True, "IgnorePublicAcls": True,
                                            "BlockPublicPolicy": True, "RestrictPublicBuckets": True}
    assert requests.get(f"{plane.endpoint}/site/index.html").status_code == 403
    assert plane.admin_s3.get_public_access_block(Bucket="site")["PublicAccessBlockConfiguration"][
        "IgnorePublicAcls"] is True
    code, shown = strata("bucket", "public-access", "site", "none")
    assert code == 0 and shown["public_access_block"] is None
    assert requests.get(f"{plane.endpoint}/site/index.html").status_code == 200

    code, shown = strata("bucket", "set-acl", "site", "private")
    assert code == 0 and shown["acl"] == "private"
    assert requests.get(f"{plane.endpoint}/site?list-type=2").status_code == 403
    code, shown = strata("bucket", "set-ownership", "site", "BucketOwnerEnforced")
    assert code == 0 and shown["object_ownership"] == "BucketOwnerEnforced"
    # ACLs are off now: the object's public-read grant no longer counts
    assert requests.get(f"{plane.endpoint}/site/index.html").status_code == 403
    refused = api.patch("/api/v1/buckets/site/", {"acl": "public-read"}, format="json")
    assert refused.status_code == 400 and "InvalidBucketAclWithObjectOwnership" in refused.json()["detail"]
    code, err = strata("bucket", "public-access", "site", "no-such-flag")
    assert code != 0 and "unknown flag" in err
    bad = api.patch("/api/v1/buckets/site/", {"acl": "custom"}, format="json")
    assert bad.status_code == 400 and "acl" in bad.json()["fields"]

    # a change made over S3 shows in the bucket's detail
    strata("bucket", "set-ownership", "site", "none")
    plane.admin_s3.put_bucket_acl(Bucket="site", GrantRead='uri="http://acs.amazonaws.com/groups/global/AllUsers"',
                                  GrantWrite='id="admin"')
    assert api.get("/api/v1/buckets/site/").json()["acl"] == "custom"

    client.force_login(User.objects.get(username="admin"))
    page = client.get("/console/buckets/").content.decode()
    assert "Block public access" in page and "custom" in page

    changes = AuditEvent.objects.filter(method="PATCH", path="/api/v1/buckets/site/")
    bodies = [e.detail["request"] for e in changes.order_by("id")]
    assert {"public_access_block": {"BlockPublicAcls": True, "IgnorePublicAcls": True,
                                    "BlockPublicPolicy": True, "RestrictPublicBuckets": True}} in bodies
    assert {"acl": "private"} in bodies and {"object_ownership": "BucketOwnerEnforced"} in bodies
