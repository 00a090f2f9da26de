"""SSE-KMS keys kept by the appliance, against a gateway started as `strata up` starts it:
made, listed, shown, disabled and enabled through the REST API and the CLI (audited), their
material sealed in the database and given to the gateway only in its 0600 config, and used
over S3 by boto3 by id, alias and ARN; a disabled key refuses new objects and reads of its
objects with S3's 400 KMS.DisabledException, an unknown one 400 KMS.NotFoundException."""
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

from plane.models import AuditEvent
from plane.secrets import unseal
from services.object.models import KmsKey
from services.object.tests.planefixture import plane  # noqa: F401 (plane: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]


def error_of(exc_info) -> tuple[int, str]:
    resp = exc_info.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


def refused(call) -> tuple[int, str]:
    with pytest.raises(ClientError) as e:
        call()
    return error_of(e)


def test_kms_keys_through_the_api_and_s3(plane, api, data_dir):
    made = api.post("/api/v1/kms-keys/", {"alias": "ckpt", "description": "checkpoints"}, format="json")
    assert made.status_code == 201, made.content
    key = made.json()
    kid = key["key_id"]
    assert uuid.UUID(kid) and key["alias"] == "alias/ckpt" and key["key_state"] == "Enabled"
    assert key["arn"] == f"arn:aws:kms:us-east-1:000000000000:key/{kid}"
    assert "material" not in json.dumps(key) and "sealed" not in json.dumps(key)
    assert api.post("/api/v1/kms-keys/", {"alias": "alias/ckpt"}, format="json").status_code == 400
    assert api.post("/api/v1/kms-keys/", {"alias": "alias/aws-s3"}, format="json").status_code == 400
    other = api.post("/api/v1/kms-keys/", {}, format="json").json()
    assert other["alias"] is None
    assert [k["key_id"] for k in api.get("/api/v1/kms-keys/").json()["results"]] == [kid, other["key_id"]]
    assert api.get(f"/api/v1/kms-keys/{kid}/").json()["description"] == "checkpoints"
    assert api.get("/api/v1/kms-keys/ckpt/").json()["key_id"] == kid   # by its alias's name
    assert api.get("/api/v1/kms-keys/nope/").status_code == 404
    assert api.delete(f"/api/v1/kms-keys/{kid}/").status_code == 405    # objects would be lost

    # material: sealed in the database, only in the gateway's 0600 config, never in the data root
    config_path = data_dir / "run" / "s3" / "gateway.json"
    config = json.loads(config_path.read_text())
    material = config["kms_keys"][kid]["material"]
    row = KmsKey.objects.get(key_id=kid)
    assert len(base64.b64decode(material)) == 32 and material not in row.sealed_material
    assert unseal(row.sealed_material) == material
    assert config["kms_keys"][kid]["aliases"] == ["alias/ckpt"] and config["kms_keys"][kid]["enabled"] is True
    assert config_path.stat().st_mode & 0o777 == 0o600

    s3 = plane.admin_s3
    assert api.post("/api/v1/buckets/", {"name": "models"}, format="json").status_code == 201
    put = s3.put_object(Bucket="models", Key="by-id", Body=b"weights 1", ServerSideEncryption="aws:kms",
                        SSEKMSKeyId=kid)
    assert (put["ServerSideEncryption"], put["SSEKMSKeyId"]) == ("aws:kms", key["arn"])
    for name, ref in (("by-alias", "alias/ckpt"), ("by-arn", key["arn"]),
                      ("by-alias-arn", "arn:aws:kms:us-east-1:000000000000:alias/ckpt")):
        assert s3.put_object(Bucket="models", Key=name, Body=b"weights 2", ServerSideEncryption="aws:kms",
                             SSEKMSKeyId=ref)["SSEKMSKeyId"] == key["arn"]
    assert s3.get_object(Bucket="models", Key="by-id")["Body"].read() == b"weights 1"
    assert s3.head_object(Bucket="models", Key="by-alias")["SSEKMSKeyId"] == key["arn"]
    assert refused(lambda: s3.put_object(Bucket="models", Key="x", Body=b"x", ServerSideEncryption="aws:kms",
                                         SSEKMSKeyId=str(uuid.uuid4()))) == (400, "KMS.NotFoundException")
    for dirpath, _, files in os.walk(config["data_root"]):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                data = fh.read()
            assert material.encode() not in data and b"weights 1" not in data

    # a bucket's default encryption may name the key by its alias
    changed = api.patch("/api/v1/buckets/models/", {"encryption": "aws:kms", "kms_key_id": "alias/ckpt"},
                        format="json")
    assert changed.status_code == 200, changed.content
    assert s3.put_object(Bucket="models", Key="default", Body=b"weights 3")["SSEKMSKeyId"] == key["arn"]

    disabled = api.post(f"/api/v1/kms-keys/{kid}/disable/")
    assert disabled.status_code == 200 and disabled.json()["key_state"] == "Disabled"
    assert json.loads(config_path.read_text())["kms_keys"][kid]["enabled"] is False
    assert refused(lambda: s3.put_object(Bucket="models", Key="y", Body=b"y", ServerSideEncryption="aws:kms",
                                         SSEKMSKeyId=kid)) == (400, "KMS.DisabledException")
    assert refused(lambda: s3.put_object(Bucket="models", Key="y", Body=b"y")) == (400, "KMS.DisabledException")
    assert refused(lambda: s3.get_object(Bucket="models", Key="by-id")) == (400, "KMS.DisabledException")
    assert refused(lambda: s3.copy_object(Bucket="models", Key="copy", CopySource={
        "Bucket": "models", "Key": "by-arn"}, ServerSideEncryption="AES256")) == (400, "KMS.DisabledException")
    assert refused(lambda: s3.create_multipart_upload(Bucket="models", Key="mp", ServerSideEncryption="aws:kms",
                                                      SSEKMSKeyId=kid)) == (400, "KMS.DisabledException")
    s3.put_object(Bucket="models", Key="other", Body=b"o", ServerSideEncryption="aws:kms",
                  SSEKMSKeyId=other["key_id"])   # other keys keep working
    assert s3.get_object(Bucket="models", Key="other")["Body"].read() == b"o"

    assert api.post(f"/api/v1/kms-keys/{kid}/enable/").json()["key_state"] == "Enabled"
    assert s3.get_object(Bucket="models", Key="by-id")["Body"].read() == b"weights 1"
    assert s3.get_object(Bucket="models", Key="default")["Body"].read() == b"weights 3"

    actions = [(e.action, e.status_code) for e in AuditEvent.objects.filter(path__startswith="/api/v1/kms-keys/")]
    assert sum(1 for a, code in actions if code == 201) == 2
    assert {code for _, code in actions} >= {201, 200, 400}
    assert len([e for e in AuditEvent.objects.filter(path__endswith="/disable/") if e.status_code == 200]) == 1
    assert material not in json.dumps([e.detail for e in AuditEvent.objects.all()], default=str)


def test_cli_manages_kms_keys(plane, api, live_server):
    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/",
           "STRATA_TOKEN": api.token, "PYTHONPATH": str(ROOT)}

    def strata(*args):
        r = subprocess.run([sys.executable, "-m", "console.cli.main", "--json", *args], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        return r.returncode, json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else r.stderr

    code, made = strata("kms-key", "create", "--alias", "alias/cli-key", "--description", "from the CLI")
    assert code == 0, made
    assert (made["alias"], made["key_state"], made["description"]) == ("alias/cli-key", "Enabled", "from the CLI")
    code, listed = strata("kms-key", "list")
    assert code == 0 and [k["key_id"] for k in listed] == [made["key_id"]]
    for ref in (made["key_id"], "alias/cli-key", made["arn"]):
        assert strata("kms-key", "show", ref)[1]["key_id"] == made["key_id"]
    s3 = plane.admin_s3
    s3.create_bucket(Bucket="cli-kms")
    assert strata("kms-key", "disable", "alias/cli-key")[1]["key_state"] == "Disabled"
    assert refused(lambda: s3.put_object(Bucket="cli-kms", Key="k", Body=b"x", ServerSideEncryption="aws:kms",
                                         SSEKMSKeyId="alias/cli-key")) == (400, "KMS.DisabledException")
    assert strata("kms-key", "enable", made["arn"])[1]["key_state"] == "Enabled"
    assert s3.put_object(Bucket="cli-kms", Key="k", Body=b"x", ServerSideEncryption="aws:kms",
                         SSEKMSKeyId="alias/cli-key")["SSEKMSKeyId"] == made["arn"]
    code, err = strata("kms-key", "show", "no-such-key")
    assert code == 1 and "No KMS key" in err
