"""A checkpoint saved through S3 on a real appliance: shards PUT with boto3 and the admin's
keys from credentials.json, committed through the catalog, which verifies them against the
gateway with the plane's own key; a missing shard is refused and `latest` stays put."""
import hashlib

import boto3
import pytest
import requests
from botocore.config import Config

from tests.appliance import Appliance

pytestmark = pytest.mark.root


@pytest.fixture
def appliance():
    app = Appliance()
    try:
        yield app.start()
    finally:
        app.destroy()


def test_s3_checkpoint_commit_and_refusal(appliance):
    creds = appliance.credentials
    api = requests.Session()
    api.headers["Authorization"] = f"Token {creds['token']}"
    base = creds["api_url"]
    s3 = boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                      aws_access_key_id=creds["s3_access_key"],
                      aws_secret_access_key=creds["s3_secret_key"], region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    assert api.post(base + "buckets/", json={"name": "ckpts"}).status_code == 201
    assert api.post(base + "checkpoint-jobs/", json={"name": "gpt", "bucket": "ckpts"}
                    ).status_code == 201

    def save(step, shards: dict, manifest_extra=()):
        v = api.post(base + "checkpoint-jobs/gpt/versions/", json={"step": step}).json()
        bucket, _, prefix = v["s3_prefix"][len("s3://"):].partition("/")
        for name, data in shards.items():
            s3.put_object(Bucket=bucket, Key=prefix + name, Body=data)
        manifest = [{"name": n, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                    for n, d in shards.items()] + list(manifest_extra)
        return v, api.post(base + f"checkpoint-jobs/gpt/versions/{v['id']}/commit/",
                           json={"manifest": manifest, "location": "s3"})

    shards = {f"rank{i}.distcp": bytes([i]) * (256 << 10) for i in range(4)}
    v1, r = save(100, shards)
    assert r.status_code == 200, r.text
    assert api.get(base + "checkpoint-jobs/gpt/latest/").json()["step"] == 100

    _, r = save(200, shards, [{"name": "rank4.distcp", "size": 1024}])
    assert r.status_code == 409 and "rank4.distcp" in r.text
    latest = api.get(base + "checkpoint-jobs/gpt/latest/").json()
    assert (latest["id"], latest["state"]) == (v1["id"], "committed")
