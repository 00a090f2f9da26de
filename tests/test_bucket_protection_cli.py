"""Bucket snapshots and bucket replication end to end on a real appliance (`strata up`),
driven by the `strata` CLI as a user would, bytes checked with boto3 by SHA-256."""
import hashlib
import json
import os

import boto3
import pytest
from botocore.config import Config

from tests.appliance import Appliance

pytestmark = pytest.mark.root


@pytest.fixture
def appliance():
    app = Appliance()
    yield app
    app.destroy()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_bucket_schedule_restore_and_replication_through_the_cli(appliance):
    app = appliance.start()
    creds = app.credentials
    s3 = boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                      aws_access_key_id=creds["s3_access_key"],
                      aws_secret_access_key=creds["s3_secret_key"], region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))

    def cli(*args):
        r = app.cli(*args)
        assert r.returncode == 0, r.stdout + r.stderr
        return r

    cli("bucket", "create", "plain")
    r = app.cli("schedule", "create", "often", "--bucket", "plain", "--every", "60",
                "--keep-last", "2")
    assert r.returncode == 1 and "enable versioning" in r.stderr and "(409)" in r.stderr
    r = app.cli("bucket-snapshot", "create", "no-such-bucket")
    assert r.returncode == 1 and "no bucket no-such-bucket (400)" in r.stderr.replace(".", ""), r.stderr

    cli("bucket", "create", "models", "--versioning")
    cli("schedule", "create", "often", "--bucket", "models", "--every", "60", "--keep-last", "2")
    gens = []
    for gen in range(3):
        data = {f"step-{i}": os.urandom(20_000 + gen) for i in range(3)}
        for key, value in data.items():
            s3.put_object(Bucket="models", Key=key, Body=value)
        gens.append(data)
        r = cli("schedule", "run", "often")
        assert "succeeded" in r.stdout
    snaps = json.loads(cli("--json", "bucket-snapshot", "list", "--bucket", "models").stdout)
    assert len(snaps) == 2 and all(s["name"].startswith("auto-often-") for s in snaps)

    r = cli("bucket-snapshot", "restore", snaps[0]["id"], "models-gen1")
    assert "succeeded" in r.stdout
    for key, value in gens[1].items():
        got = s3.get_object(Bucket="models-gen1", Key=key)["Body"].read()
        assert sha(got) == sha(value)

    cli("bucket", "create", "mirror", "--versioning")
    cli("backup-target", "create", "self", creds["s3_endpoint"], "--bucket", "mirror",
        "--access-key", creds["s3_access_key"], "--secret-key", creds["s3_secret_key"])
    cli("bucket-replication", "create", "models-mirror", "--bucket", "models", "--target", "self")
    r = cli("bucket-replication", "sync", "models-mirror")
    assert "succeeded" in r.stdout
    for key, value in gens[2].items():
        assert sha(s3.get_object(Bucket="mirror", Key=key)["Body"].read()) == sha(value)
    shown = json.loads(cli("--json", "bucket-replication", "show", "models-mirror").stdout)
    assert shown["state"] == "ok" and shown["last_versions"] == 9

    # lifecycle rules are applied by the plane, as a job (the appliance's gateway runs no
    # pass of its own): an expiration rule with a date in the past removes the mirror's
    # current versions, leaving delete markers
    s3.put_bucket_lifecycle_configuration(Bucket="mirror", LifecycleConfiguration={
        "Rules": [{"ID": "expire", "Filter": {"Prefix": ""}, "Status": "Enabled",
                   "Expiration": {"Date": "2020-01-01T00:00:00Z"}}]})
    done = json.loads(cli("--json", "bucket", "lifecycle-run").stdout)
    assert done["state"] == "succeeded" and done["result"]["expired"] == 3, done
    assert s3.list_objects_v2(Bucket="mirror").get("KeyCount") == 0
