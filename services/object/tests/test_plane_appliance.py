"""End to end: a real `strata up` gives credentials.json S3 keys that work with boto3 on
``s3_endpoint``; after a restart (pool mounted again by the bootstrap) the object and the key
are still there."""
from __future__ import annotations

import hashlib
import json
import os

import pytest
import requests

from services.object.tests.planefixture import s3_client
from tests.appliance import Appliance


@pytest.fixture
def appliance():
    app = Appliance()
    try:
        yield app.start()
    finally:
        for log in sorted((app.data_dir / "log").glob("*.log")):  # shown only on failure
            print(f"==> {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        app.destroy()


def test_strata_up_serves_s3_with_the_credentials_file(appliance):
    creds = appliance.credentials
    assert creds["s3_endpoint"] == f"http://127.0.0.1:{appliance.s3_port}"
    s3 = s3_client(creds["s3_endpoint"], creds["s3_access_key"], creds["s3_secret_key"])
    api = requests.Session()
    api.headers["Authorization"] = f"Token {creds['token']}"
    made = api.post(f"{creds['api_url']}buckets/", json={"name": "e2e", "quota_bytes": 1 << 30})
    assert made.status_code == 201, made.text
    body = os.urandom(300_000)  # above the small-object threshold: its own file
    s3.put_object(Bucket="e2e", Key="ckpt/shard-0", Body=body)
    s3.put_object(Bucket="e2e", Key="ckpt/meta", Body=b"small")
    got = s3.get_object(Bucket="e2e", Key="ckpt/shard-0")["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
    shown = api.get(f"{creds['api_url']}buckets/e2e/").json()
    assert (shown["used_objects"], shown["used_bytes"]) == (2, len(body) + 5)
    assert shown["filesystem"] == "s3" and shown["pool"] == "default"

    made = appliance.cli("--json", "s3-key", "create", "--user", "trainer")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    trainer = s3_client(creds["s3_endpoint"], key["access_key"], key["secret_key"])
    trainer.create_bucket(Bucket="trainer-bkt")
    assert "trainer-bkt" in appliance.cli("bucket", "list").stdout  # made over S3, listed

    appliance.stop()
    appliance.start()
    again = appliance.credentials
    assert again["s3_access_key"] == creds["s3_access_key"]
    assert s3.get_object(Bucket="e2e", Key="ckpt/meta")["Body"].read() == b"small"
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["e2e", "trainer-bkt"]
    assert trainer.list_objects_v2(Bucket="trainer-bkt")["KeyCount"] == 0
