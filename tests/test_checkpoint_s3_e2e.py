"""A checkpoint saved through S3 on a real appliance: shards PUT with boto3 and the admin's
keys from credentials.json, committed through the catalog, which verifies them against the
gateway with the plane's own key; a missing shard is refused and `latest` stays put. And a
training script's path: the SDK from credentials.json, PyTorch DCP save through the S3
writer (multipart), commit, load back by ranged GETs."""
import hashlib

import boto3
import pytest
import requests
from botocore.config import Config

from tests.appliance import Appliance

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
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


def test_sdk_dcp_save_and_load_through_s3(appliance):
    torch = pytest.importorskip("torch", reason="DCP needs torch==2.13.0")
    import warnings

    import torch.distributed.checkpoint as dcp

    from services.checkpoints.sdk import CheckpointClient

    warnings.filterwarnings("ignore", message=".*assuming the intent is to")
    client = CheckpointClient.from_credentials(str(appliance.data_dir / "credentials.json"))
    try:
        assert client._call("POST", "buckets/", {"name": "train-ckpts"})[0] == 201
        client.create_job("llama", bucket="train-ckpts")
        torch.manual_seed(5)
        state = {"emb": torch.randn(5 << 20),  # 20 MiB: parts of 8 MiB
                 "layers": {f"{i}.w": torch.randn(8, 8) for i in range(50)}, "step": 300}
        writer = client.dcp_writer("llama", 300)
        dcp.save(state, storage_writer=writer)
        assert writer.version.state == "committed"
        latest = client.latest("llama")
        assert latest.step == 300 and latest.s3_prefix == "s3://train-ckpts/llama/step-300/"

        target = {"emb": torch.zeros(5 << 20),
                  "layers": {f"{i}.w": torch.zeros(8, 8) for i in range(50)}, "step": 0}
        with client.dcp_reader("llama") as reader:
            dcp.load(target, storage_reader=reader)
        assert target["step"] == 300 and torch.equal(target["emb"], state["emb"])
        assert all(torch.equal(target["layers"][k], v) for k, v in state["layers"].items())
    finally:
        client.close()
