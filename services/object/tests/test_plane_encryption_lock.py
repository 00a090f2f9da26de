"""The plane's side of encryption and Object Lock, against a gateway started as `strata up`
starts it: the SSE master key made at first start (sealed in the database, in the gateway's
0600 config outside the data root), buckets' default encryption and Object Lock set through
the REST API and the CLI, shown in the bucket's detail, and enforced over S3 (boto3)."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from services.object import bootstrap
from services.object.models import Gateway
from services.object.tests.planefixture import plane  # noqa: F401 (plane: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]


def check_master_key_made_once_sealed_and_kept_apart_from_the_data(plane, data_dir):
    """(Runs after objects were written, so the data root has files to search.)"""
    gw = Gateway.objects.get()
    config = json.loads((data_dir / "run" / "s3" / "gateway.json").read_text())
    key = config["sse_master_key"]
    assert len(base64.b64decode(key)) == 32
    assert key not in gw.sealed_master_key and gw.sealed_master_key   # sealed, not stored as it is
    assert not str(data_dir / "run" / "s3" / "gateway.json").startswith(config["data_root"])
    for dirpath, _, files in os.walk(config["data_root"]):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                assert key.encode() not in fh.read()
    bootstrap.bootstrap({"username": "admin", **plane.creds})   # the next `strata up`
    assert json.loads((data_dir / "run" / "s3" / "gateway.json").read_text())["sse_master_key"] == key
    for log in data_dir.glob("*.log"):
        assert key not in log.read_text(errors="replace")


def test_master_key_and_bucket_encryption_and_lock_through_rest_and_s3(plane, api, data_dir):
    s3 = plane.admin_s3
    made = api.post("/api/v1/buckets/", {"name": "vault", "encryption": "AES256", "object_lock": True,
                                         "lock_mode": "GOVERNANCE", "lock_days": 1}, format="json")
    assert made.status_code == 201, made.content
    shown = api.get("/api/v1/buckets/vault/").json()
    assert {k: shown[k] for k in ("versioning", "encryption", "object_lock", "lock_mode", "lock_days")} == {
        "versioning": "Enabled", "encryption": "AES256", "object_lock": True, "lock_mode": "GOVERNANCE",
        "lock_days": 1}
    put = s3.put_object(Bucket="vault", Key="ckpt/step-100/shard-0", Body=b"weights")
    assert put["ServerSideEncryption"] == "AES256"
    assert s3.head_object(Bucket="vault", Key="ckpt/step-100/shard-0")["ObjectLockMode"] == "GOVERNANCE"
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket="vault", Key="ckpt/step-100/shard-0", VersionId=put["VersionId"])
    assert e.value.response["Error"]["Code"] == "AccessDenied"
    # settings made over S3 show in the REST API
    s3.put_bucket_encryption(Bucket="vault", ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]})
    assert api.get("/api/v1/buckets/vault/").json()["encryption"] == "aws:kms"
    changed = api.patch("/api/v1/buckets/vault/", {"encryption": ""}, format="json")
    assert changed.status_code == 200 and changed.json()["encryption"] == ""
    with pytest.raises(ClientError):
        s3.get_bucket_encryption(Bucket="vault")
    refused = api.patch("/api/v1/buckets/vault/", {"encryption": "aws:kms", "kms_key_id": "no-such-key"},
                        format="json")
    assert refused.status_code == 400, refused.content
    refused = api.patch("/api/v1/buckets/vault/", {"object_lock": False}, format="json")
    assert refused.status_code == 400
    check_master_key_made_once_sealed_and_kept_apart_from_the_data(plane, data_dir)
    plain = api.post("/api/v1/buckets/", {"name": "plain"}, format="json")
    assert plain.status_code == 201 and plain.json()["object_lock"] is False
    refused = api.patch("/api/v1/buckets/plain/", {"object_lock": True}, format="json")
    assert refused.status_code == 409, refused.content   # versioning must be Enabled first
    refused = api.post("/api/v1/buckets/", {"name": "bad", "lock_mode": "COMPLIANCE", "lock_days": 3},
                       format="json")
    assert refused.status_code == 400


def test_cli_sets_encryption_and_object_lock(plane, api, live_server):
    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/",
           "STRATA_TOKEN": api.token, "PYTHONPATH": str(ROOT)}

    def strata(*args):
        return subprocess.run([sys.executable, "-m", "console.cli.main", "--json", *args], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)

    name = f"cli-{uuid.uuid4().hex[:8]}"
    r = strata("bucket", "create", name, "--encryption", "AES256", "--object-lock")
    assert r.returncode == 0 and json.loads(r.stdout)["encryption"] == "AES256", r.stderr
    r = strata("bucket", "object-lock", name, "--mode", "COMPLIANCE", "--days", "2")
    assert r.returncode == 0, r.stderr
    shown = json.loads(strata("bucket", "show", name).stdout)
    assert (shown["encryption"], shown["object_lock"], shown["lock_mode"], shown["lock_days"]) == (
        "AES256", True, "COMPLIANCE", 2)
    s3 = plane.admin_s3
    assert s3.put_object(Bucket=name, Key="k", Body=b"x")["ServerSideEncryption"] == "AES256"
    assert s3.get_object_lock_configuration(Bucket=name)["ObjectLockConfiguration"]["Rule"]["DefaultRetention"] == {
        "Mode": "COMPLIANCE", "Days": 2}
    r = strata("bucket", "encryption", name, "aws:kms", "--kms-key-id", "nope")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
