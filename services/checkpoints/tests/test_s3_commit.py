"""Commit through S3: shards written to a version's S3 prefix on a real Strata S3 gateway
are verified (sizes, and the CRC32C/SHA-256 the gateway stored) before the version commits;
retention deletes a superseded version's objects."""
import base64
import hashlib
import os

import pytest

from services.checkpoints import retention
from services.checkpoints.models import CheckpointJob
from services.checkpoints.sources import S3Source, make_client
from services.checkpoints.verify import crc32c_update
from services.checkpoints.tests.conftest import ACCESS, SECRET

pytest.importorskip("boto3", reason="S3 commit tests need boto3")
pytest.importorskip("uvicorn", reason="the S3 gateway needs uvicorn")
pytestmark = [pytest.mark.django_db]


def put(s3, prefix, name, data, crc=False):
    bucket, key = prefix[5:].split("/", 1)
    # the checksum is sent with the object (the gateway checks and stores it); botocore would
    # need its crt extra to compute CRC32C itself
    extra = {"ChecksumCRC32C": base64.b64encode(crc32c_update(0, data).to_bytes(4, "big"))
             .decode()} if crc else {}
    s3.put_object(Bucket=bucket, Key=key + name, Body=data, **extra)
    return {"name": name, "size": len(data)}


def keys(s3, prefix):
    bucket, key = prefix[5:].split("/", 1)
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=key).get(
        "Contents", []))


def test_commit_through_s3_is_verified_and_retention_deletes_objects(api, gateway, settings):
    settings.STRATA_CHECKPOINT_S3 = gateway
    s3 = make_client(gateway["endpoint"], ACCESS, SECRET)
    s3.create_bucket(Bucket="ckpt")
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "bucket": "ckpt", "keep_last": 1},
                 format="json")
    assert r.status_code == 201, r.json()
    v1 = api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": 1}, format="json").json()
    assert v1["path"] == "" and v1["s3_prefix"] == "s3://ckpt/llm/step-1/"

    big, small = os.urandom(300 * 1024), os.urandom(1000)  # a file object and a segment one
    e_big = put(s3, v1["s3_prefix"], "rank0.distcp", big, crc=True)
    e_small = put(s3, v1["s3_prefix"], "rank1.distcp", small)
    # the gateway hands back the CRC32C it verified at upload: no need to read the data
    size, stored = S3Source(s3, "ckpt", "llm/step-1/").stat("rank0.distcp")
    assert (size, stored) == (len(big), {"crc32c": f"{crc32c_update(0, big):08x}"})
    e_big["crc32c"] = base64.b64encode(crc32c_update(0, big).to_bytes(4, "big")).decode()
    e_small["sha256"] = hashlib.sha256(b"not the data").hexdigest()
    url = f"/api/v1/checkpoint-jobs/llm/versions/{v1['id']}/commit/"
    r = api.post(url, {"manifest": [e_big, e_small, {"name": ".metadata", "size": 10}]},
                 format="json")
    assert r.status_code == 409, r.json()
    assert {(s["name"], s["problem"]) for s in r.json()["shards"]} == {
        ("rank1.distcp", "sha256_mismatch"), (".metadata", "missing")}
    assert api.get("/api/v1/checkpoint-jobs/llm/latest/").status_code == 404

    e_small["sha256"] = hashlib.sha256(small).hexdigest()
    e_meta = put(s3, v1["s3_prefix"], ".metadata", b"m" * 10)
    r = api.post(url, {"manifest": [e_big, e_small, e_meta]}, format="json")
    assert r.status_code == 200, r.json()
    assert (r.json()["state"], r.json()["location"]) == ("committed", "s3")
    assert api.get("/api/v1/checkpoint-jobs/llm/latest/").json()["step"] == 1

    v2 = api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": 2}, format="json").json()
    e = put(s3, v2["s3_prefix"], "rank0.distcp", b"x" * 5000)
    r = api.post(f"/api/v1/checkpoint-jobs/llm/versions/{v2['id']}/commit/",
                 {"manifest": [e]}, format="json")
    assert r.status_code == 200 and api.get(
        "/api/v1/checkpoint-jobs/llm/latest/").json()["step"] == 2

    result = retention.apply(CheckpointJob.objects.get(name="llm"))
    assert result["deleted_steps"] == [1]
    assert keys(s3, v1["s3_prefix"]) == []
    assert keys(s3, v2["s3_prefix"]) == ["llm/step-2/rank0.distcp"]


def test_a_job_on_a_bucket_needs_the_bucket_and_an_endpoint(api, gateway, settings):
    settings.STRATA_CHECKPOINT_S3 = None
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "bucket": "ckpt"}, format="json")
    assert r.status_code == 503 and "STRATA_CHECKPOINT_S3" in r.json()["detail"], r.json()
    settings.STRATA_CHECKPOINT_S3 = gateway
    for bucket, why in (("nope", "no bucket nope"), ("Not_A-Bucket!", "not a bucket name")):
        r = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "bucket": bucket},
                     format="json")
        assert r.status_code == 400 and why in r.json()["detail"], r.json()
    assert api.get("/api/v1/checkpoint-jobs/").json()["count"] == 0


def test_scan_and_commit_on_a_bucket_that_vanished_are_a_clear_409(api, gateway, settings):
    settings.STRATA_CHECKPOINT_S3 = gateway
    s3 = make_client(gateway["endpoint"], ACCESS, SECRET)
    s3.create_bucket(Bucket="brief")
    assert api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "bucket": "brief"},
                    format="json").status_code == 201
    v = api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": 1}, format="json").json()
    s3.delete_bucket(Bucket="brief")
    r = api.post("/api/v1/checkpoint-jobs/llm/scan/", format="json")
    assert r.status_code == 409 and r.json()["error"] == "no_such_bucket", r.content
    r = api.post(f"/api/v1/checkpoint-jobs/llm/versions/{v['id']}/commit/",
                 {"manifest": [{"name": "a", "size": 1}]}, format="json")
    assert r.status_code == 409 and "no bucket brief" in r.json()["detail"], r.content


def test_s3_commit_without_an_endpoint_is_a_clear_409(api, gateway, settings):
    settings.STRATA_CHECKPOINT_S3 = gateway
    make_client(gateway["endpoint"], ACCESS, SECRET).create_bucket(Bucket="ckpt")
    api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "bucket": "ckpt"}, format="json")
    settings.STRATA_CHECKPOINT_S3 = None  # the gateway went away after the job was made
    v = api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": 1}, format="json").json()
    r = api.post(f"/api/v1/checkpoint-jobs/llm/versions/{v['id']}/commit/",
                 {"manifest": [{"name": "a", "size": 1}]}, format="json")
    assert r.status_code == 409 and "STRATA_CHECKPOINT_S3" in r.json()["detail"]


def test_dcp_and_orbax_checkpoints_written_to_s3_are_detected(api, gateway, settings, tmp_path):
    torch = pytest.importorskip("torch", reason="needs torch==2.13.0 for a real DCP save")
    import warnings

    import torch.distributed.checkpoint as dcp

    settings.STRATA_CHECKPOINT_S3 = gateway
    s3 = make_client(gateway["endpoint"], ACCESS, SECRET)
    s3.create_bucket(Bucket="ckpt")
    api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "bucket": "ckpt"}, format="json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.arange(5000.0)}, checkpoint_id=str(tmp_path / "dcp"))
    files = sorted(os.listdir(tmp_path / "dcp"))
    for step in (5, 6):
        for name in files:  # what an S3 DCP writer leaves: shards, then .metadata
            put(s3, f"s3://ckpt/llm/step-{step}/", name, (tmp_path / "dcp" / name).read_bytes())
    # step 6's shard was overwritten by a short one after .metadata: not committed
    shard = next(n for n in files if n.endswith(".distcp"))
    put(s3, "s3://ckpt/llm/step-6/", shard, b"short")
    # Orbax on an object store: only commit_success.txt finishes a step
    put(s3, "s3://ckpt/llm/7/", "_CHECKPOINT_METADATA", b"{}")
    put(s3, "s3://ckpt/llm/7/", "default/d/0", b"z" * 100)
    put(s3, "s3://ckpt/llm/8/", "default/d/0", b"y" * 100)
    put(s3, "s3://ckpt/llm/8/", "commit_success.txt", b"ok")

    r = api.post("/api/v1/checkpoint-jobs/llm/scan/")
    assert r.status_code == 200, r.json()
    summary = r.json()
    assert sorted(summary["committed"]) == [5, 8] and summary["writing"] == [7], summary
    assert [p["problem"] for p in summary["incomplete"]["6"]] == ["short"]
    latest = api.get("/api/v1/checkpoint-jobs/llm/latest/").json()
    assert latest["step"] == 8 and latest["s3_prefix"] == "s3://ckpt/llm/8/"
    versions = {v["step"]: v for v in api.get(
        "/api/v1/checkpoint-jobs/llm/versions/").json()["results"]}
    assert (versions[5]["format"], versions[5]["location"]) == ("dcp", "s3")
    assert versions[6]["state"] == versions[7]["state"] == "writing"
