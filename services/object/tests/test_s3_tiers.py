"""Lifecycle transitions to the capacity tier and RestoreObject, through boto3 against a real
gateway whose config names a cold root (a lifecycle "day" is one second here)."""
from __future__ import annotations

import hashlib
import os
import time

import pytest
from botocore.exceptions import ClientError

from plumbing.redisurl import redis_from_url
from services.object.admin_client import GatewayAdminClient
from services.object.tests.gatewayproc import ADMIN_TOKEN, GatewayProcess
from tests.kit import wait_for

MIB = 1024 * 1024


def code_of(exc_info) -> str:
    return exc_info.value.response["Error"]["Code"]


def files_under(path) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names)


def cold_files(gw) -> list[str]:
    return files_under(os.path.join(gw.cold_root, "buckets"))


def start_tiered(tmp_path, **settings) -> GatewayProcess:
    cold = tmp_path / "capacity"
    cold.mkdir()
    gw = GatewayProcess(str(tmp_path), cold_root=str(cold), lifecycle_day_seconds=1, lifecycle_interval=3600,
                        **settings)
    gw.cold_root = str(cold)
    gw.start()
    return gw


@pytest.fixture
def tiered(tmp_path):
    gw = start_tiered(tmp_path)
    try:
        yield gw
    finally:
        gw.stop()


def budget_redis():
    """(client, URL) of the Redis the I/O budget tests use (the suite's STRATA_REDIS_URL)."""
    url = os.environ.get("STRATA_REDIS_URL")
    if not url:
        pytest.skip("set STRATA_REDIS_URL to test the I/O budget")
    return redis_from_url(url), url


def run_lifecycle(gw) -> dict:
    return GatewayAdminClient(gw.endpoint, ADMIN_TOKEN).apply_lifecycle()


def transition_rule(cls: str, prefix: str = "", days: int = 1) -> dict:
    return {"Rules": [{"ID": f"to-{cls}", "Filter": {"Prefix": prefix}, "Status": "Enabled",
                       "Transitions": [{"Days": days, "StorageClass": cls}]}]}


def put_three(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    """A segment object, a large object and a two-part multipart object; their bytes by key."""
    small, large = os.urandom(3000), os.urandom(3 * MIB + 7)
    s3.put_object(Bucket=bucket, Key=f"{prefix}small", Body=small)
    s3.put_object(Bucket=bucket, Key=f"{prefix}large", Body=large)
    p1, p2 = os.urandom(5 * MIB), os.urandom(MIB)
    up = s3.create_multipart_upload(Bucket=bucket, Key=f"{prefix}mpu")["UploadId"]
    etags = [s3.upload_part(Bucket=bucket, Key=f"{prefix}mpu", UploadId=up, PartNumber=n, Body=b)["ETag"]
             for n, b in ((1, p1), (2, p2))]
    s3.complete_multipart_upload(Bucket=bucket, Key=f"{prefix}mpu", UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": etags[0]}, {"PartNumber": 2, "ETag": etags[1]}]})
    return {f"{prefix}small": small, f"{prefix}large": large, f"{prefix}mpu": p1 + p2}


def test_instant_class_transition_is_transparent_to_get(tiered):
    gw, s3 = tiered, tiered.client()
    s3.create_bucket(Bucket="iab")
    objects = put_three(s3, "iab", "data/")
    s3.put_object(Bucket="iab", Key="other/stays", Body=b"hot")
    hot_files_before = files_under(os.path.join(gw.data_root, "buckets", "iab", "data"))
    s3.put_bucket_lifecycle_configuration(Bucket="iab", LifecycleConfiguration=transition_rule("STANDARD_IA", "data/"))
    time.sleep(1.2)
    stats = run_lifecycle(gw)
    assert stats["transitioned"] == 3 and stats["transition_failed"] == 0
    assert len(cold_files(gw)) == 3
    # the hot files of the large and multipart objects are released
    assert not set(hot_files_before) & set(files_under(os.path.join(gw.data_root, "buckets", "iab", "data")))
    for key, data in objects.items():
        head = s3.head_object(Bucket="iab", Key=key)
        assert head["StorageClass"] == "STANDARD_IA" and head["ContentLength"] == len(data)
        assert "Restore" not in head
        assert s3.get_object(Bucket="iab", Key=key)["Body"].read() == data
    mpu = objects["data/mpu"]
    assert s3.head_object(Bucket="iab", Key="data/mpu")["PartsCount"] == 2
    assert s3.get_object(Bucket="iab", Key="data/mpu", PartNumber=2)["Body"].read() == mpu[5 * MIB:]
    got = s3.get_object(Bucket="iab", Key="data/mpu", Range=f"bytes={5 * MIB - 5}-{5 * MIB + 4}")["Body"].read()
    assert got == mpu[5 * MIB - 5: 5 * MIB + 5]
    listed = {o["Key"]: o["StorageClass"] for o in s3.list_objects_v2(Bucket="iab")["Contents"]}
    assert listed == {"data/large": "STANDARD_IA", "data/mpu": "STANDARD_IA", "data/small": "STANDARD_IA",
                      "other/stays": "STANDARD"}
    with pytest.raises(ClientError) as e:  # instant retrieval needs no restore, as in S3
        s3.restore_object(Bucket="iab", Key="data/large", RestoreRequest={"Days": 1})
    assert code_of(e) == "InvalidObjectState"
    # a copy comes back to STANDARD; a second pass moves nothing more
    s3.copy_object(Bucket="iab", Key="copied/large", CopySource={"Bucket": "iab", "Key": "data/large"})
    # STANDARD: no x-amz-storage-class header, as S3 answers (boto3 then has no StorageClass)
    assert "StorageClass" not in s3.head_object(Bucket="iab", Key="copied/large")
    assert run_lifecycle(gw)["transitioned"] == 0
    # overwrite and delete release the cold copies
    s3.put_object(Bucket="iab", Key="data/large", Body=b"new")
    s3.delete_object(Bucket="iab", Key="data/mpu")
    wait_for(lambda: len(cold_files(gw)) == 1, 10, "one cold copy left", interval=0.05)
    assert s3.get_object(Bucket="iab", Key="data/large")["Body"].read() == b"new"


def test_archive_class_needs_restore_and_restores_expire(tiered):
    gw, s3 = tiered, tiered.client()
    s3.create_bucket(Bucket="arch")
    data = os.urandom(2 * MIB)
    s3.put_object(Bucket="arch", Key="ckpt/shard0", Body=data)
    s3.put_object(Bucket="arch", Key="ckpt/small", Body=b"tiny")
    s3.put_bucket_lifecycle_configuration(Bucket="arch", LifecycleConfiguration=transition_rule("GLACIER"))
    time.sleep(1.2)
    assert run_lifecycle(gw)["transitioned"] == 2
    head = s3.head_object(Bucket="arch", Key="ckpt/shard0")
    assert head["StorageClass"] == "GLACIER" and head["ContentLength"] == len(data) and "Restore" not in head
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="arch", Key="ckpt/shard0")
    assert code_of(e) == "InvalidObjectState" and e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    attrs = s3.get_object_attributes(Bucket="arch", Key="ckpt/shard0", ObjectAttributes=["StorageClass", "ObjectSize"])
    assert attrs["StorageClass"] == "GLACIER" and attrs["ObjectSize"] == len(data)
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket="arch", Key="copy", CopySource={"Bucket": "arch", "Key": "ckpt/shard0"})
    assert code_of(e) == "InvalidObjectState"

    r = s3.restore_object(Bucket="arch", Key="ckpt/shard0", RestoreRequest={"Days": 3})
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 202
    wait_for(lambda: 'ongoing-request="false"' in s3.head_object(Bucket="arch", Key="ckpt/shard0").get(
        "Restore", ""), 20, "the restore to finish")
    restore = s3.head_object(Bucket="arch", Key="ckpt/shard0")["Restore"]
    assert "expiry-date=" in restore
    assert hashlib.sha256(s3.get_object(Bucket="arch", Key="ckpt/shard0")["Body"].read()).digest() \
        == hashlib.sha256(data).digest()
    # already restored: 200, and the copy is still readable
    r = s3.restore_object(Bucket="arch", Key="ckpt/shard0", RestoreRequest={"Days": 3})
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 200
    # the small object was never restored: still refused
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="arch", Key="ckpt/small")
    assert code_of(e) == "InvalidObjectState"
    restored_dir = os.path.join(gw.data_root, "buckets", "arch", "restored")
    assert len(files_under(restored_dir)) == 1
    time.sleep(3.2)
    stats = run_lifecycle(gw)
    assert stats["restores_expired"] == 1 and stats["transitioned"] == 0
    assert files_under(restored_dir) == []
    assert "Restore" not in s3.head_object(Bucket="arch", Key="ckpt/shard0")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="arch", Key="ckpt/shard0")
    assert code_of(e) == "InvalidObjectState"
    # a restarted gateway still knows where the cold bytes are
    gw.stop()
    gw.start()
    s3.restore_object(Bucket="arch", Key="ckpt/small", RestoreRequest={"Days": 1})

    def restored():
        try:
            return s3.get_object(Bucket="arch", Key="ckpt/small")["Body"].read()
        except ClientError as err:
            assert err.response["Error"]["Code"] == "InvalidObjectState", err
            return None

    assert wait_for(restored, 20, "the small object's restore") == b"tiny"


def test_noncurrent_version_transition_and_colder_steps(tiered):
    gw, s3 = tiered, tiered.client()
    s3.create_bucket(Bucket="nvb")
    s3.put_bucket_versioning(Bucket="nvb", VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket="nvb", Key="model", Body=b"one" * 50000)["VersionId"]
    v2 = s3.put_object(Bucket="nvb", Key="model", Body=b"two")["VersionId"]
    s3.put_bucket_lifecycle_configuration(Bucket="nvb", LifecycleConfiguration={"Rules": [
        {"ID": "old", "Filter": {"Prefix": ""}, "Status": "Enabled",
         "NoncurrentVersionTransitions": [{"NoncurrentDays": 1, "StorageClass": "GLACIER_IR"},
                                          {"NoncurrentDays": 3, "StorageClass": "DEEP_ARCHIVE"}]}]})
    time.sleep(1.2)
    assert run_lifecycle(gw)["transitioned"] == 1
    classes = {v["VersionId"]: v["StorageClass"] for v in s3.list_object_versions(Bucket="nvb")["Versions"]}
    assert classes == {v1: "GLACIER_IR", v2: "STANDARD"}
    assert s3.get_object(Bucket="nvb", Key="model", VersionId=v1)["Body"].read() == b"one" * 50000
    time.sleep(2.2)
    assert run_lifecycle(gw)["transitioned"] == 1  # the coldest class whose time has come
    assert s3.head_object(Bucket="nvb", Key="model", VersionId=v1)["StorageClass"] == "DEEP_ARCHIVE"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="nvb", Key="model", VersionId=v1)
    assert code_of(e) == "InvalidObjectState"
    assert s3.get_object(Bucket="nvb", Key="model")["Body"].read() == b"two"
    assert len(cold_files(gw)) == 1
    s3.delete_object(Bucket="nvb", Key="model", VersionId=v1)
    wait_for(lambda: cold_files(gw) == [], 10, "no cold copy left", interval=0.05)


def test_storage_class_requests_that_cannot_be_honoured(tiered):
    s3 = tiered.client()
    s3.create_bucket(Bucket="scb")
    s3.put_object(Bucket="scb", Key="std", Body=b"x", StorageClass="STANDARD")
    for cls in ("GLACIER", "REDUCED_REDUNDANCY"):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket="scb", Key="cold", Body=b"x", StorageClass=cls)
        assert code_of(e) == "InvalidStorageClass"
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket="scb", Key="mpu", StorageClass="DEEP_ARCHIVE")
    assert code_of(e) == "InvalidStorageClass"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_lifecycle_configuration(Bucket="scb", LifecycleConfiguration=transition_rule("INTELLIGENT_TIERING"))
    assert code_of(e) == "InvalidStorageClass"
    with pytest.raises(ClientError) as e:
        s3.restore_object(Bucket="scb", Key="std", RestoreRequest={"Days": 1})
    assert code_of(e) == "InvalidObjectState"


@pytest.mark.parametrize("point", ["transition-after-copy", "transition-after-commit"])
def test_crash_during_transition_leaves_the_object_whole(tmp_path, point):
    gw = start_tiered(tmp_path, workers=1)  # the fault kills the process that serves
    try:
        s3 = gw.client()
        s3.create_bucket(Bucket="crash")
        data = os.urandom(4 * MIB)
        s3.put_object(Bucket="crash", Key="big", Body=data)
        s3.put_bucket_lifecycle_configuration(Bucket="crash", LifecycleConfiguration=transition_rule("GLACIER_IR"))
        time.sleep(1.2)
        gw.stop()
        gw.env = {"STRATA_S3_FAULT": point}
        gw.start()
        with pytest.raises(Exception):
            run_lifecycle(gw)  # the gateway dies mid-transition
        gw.proc.wait(10)
        assert gw.proc.returncode == 137
        assert len(cold_files(gw)) == 1  # the cold copy was made durable before the crash
        gw.env = {}
        gw.start()
        head = s3.head_object(Bucket="crash", Key="big")
        assert head.get("StorageClass", "STANDARD") == ("STANDARD" if point == "transition-after-copy"
                                                       else "GLACIER_IR")
        assert s3.get_object(Bucket="crash", Key="big")["Body"].read() == data
        stats = run_lifecycle(gw)
        if point == "transition-after-copy":
            # the unreferenced cold copy is removed, and the object moves this time
            assert stats["cold_orphans_removed"] == 1 and stats["transitioned"] == 1
        else:
            assert stats["cold_orphans_removed"] == 0 and stats["transitioned"] == 0
            # the hot file that the crash kept is an orphan for the collector
            gc = GatewayAdminClient(gw.endpoint, ADMIN_TOKEN)._call("POST", "gc?min_age=0")
            assert gc["files_removed"] == 1
        assert len(cold_files(gw)) == 1
        assert s3.head_object(Bucket="crash", Key="big")["StorageClass"] == "GLACIER_IR"
        assert s3.get_object(Bucket="crash", Key="big")["Body"].read() == data
    finally:
        gw.stop()


def test_restore_in_progress_is_shown_and_not_started_twice(tmp_path):
    """A recall throttled by the I/O budget (class prewarm, 1 MiB/s) is still running while
    HEAD and a second RestoreObject look at it."""
    client, url = budget_redis()
    client.delete("strata:io:class:prewarm")
    gw = start_tiered(tmp_path, io_budget_redis=url, io_budget={"classes": {"prewarm": MIB}})
    try:
        s3 = gw.client()
        s3.create_bucket(Bucket="slow")
        data = os.urandom(4 * MIB)
        s3.put_object(Bucket="slow", Key="obj", Body=data)
        s3.put_bucket_lifecycle_configuration(Bucket="slow", LifecycleConfiguration=transition_rule("GLACIER"))
        time.sleep(1.2)
        assert run_lifecycle(gw)["transitioned"] == 1
        r = s3.restore_object(Bucket="slow", Key="obj", RestoreRequest={"Days": 5})
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 202
        assert s3.head_object(Bucket="slow", Key="obj")["Restore"] == 'ongoing-request="true"'
        with pytest.raises(ClientError) as e:
            s3.restore_object(Bucket="slow", Key="obj", RestoreRequest={"Days": 5})
        assert code_of(e) == "RestoreAlreadyInProgress"
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="slow", Key="obj")
        assert code_of(e) == "InvalidObjectState"
        wait_for(lambda: 'ongoing-request="false"' in s3.head_object(Bucket="slow", Key="obj").get(
            "Restore", ""), 30, "the throttled restore to finish", interval=0.05)
        assert s3.get_object(Bucket="slow", Key="obj")["Body"].read() == data
    finally:
        gw.stop()
        client.delete("strata:io:class:prewarm")


def test_transitions_draw_from_the_io_budget(tmp_path):
    client, url = budget_redis()
    client.delete("strata:io:class:migration")
    gw = start_tiered(tmp_path, io_budget_redis=url, io_budget={"classes": {"migration": 64 * MIB}})
    try:
        s3 = gw.client()
        s3.create_bucket(Bucket="budget")
        s3.put_object(Bucket="budget", Key="obj", Body=os.urandom(3 * MIB))
        s3.put_bucket_lifecycle_configuration(Bucket="budget", LifecycleConfiguration=transition_rule("STANDARD_IA"))
        time.sleep(1.2)
        assert run_lifecycle(gw)["transitioned"] == 1
        # the migration class bucket was drawn from (64 MiB burst less the 3 MiB moved, plus refill)
        tokens = float(client.hget("strata:io:class:migration", "tokens"))
        assert tokens < 64 * MIB
    finally:
        gw.stop()
        client.delete("strata:io:class:migration")
