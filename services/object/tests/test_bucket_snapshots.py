"""Bucket snapshots and the change feed on a real gateway (admin interface + boto3): a
snapshot needs versioning, is a consistent cut under concurrent PUTs, holds its versions
against DeleteObject(versionId), DeleteObjects and lifecycle, blocks suspending versioning,
and restores into a new bucket with the old bytes; the change feed lists writes in order."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from services.object.admin_client import GatewayAdminClient, GatewayAdminError
from services.object.tests.gatewayproc import ADMIN_TOKEN, GatewayProcess


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read(s3, bucket, key, version=None) -> bytes:
    kw = {"VersionId": version} if version else {}
    return s3.get_object(Bucket=bucket, Key=key, **kw)["Body"].read()


@pytest.fixture
def admin(gateway):
    return GatewayAdminClient(gateway.endpoint, ADMIN_TOKEN)


@pytest.fixture
def vbucket(s3):
    name = f"snap-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def test_snapshot_needs_versioning(s3, bucket, admin):
    with pytest.raises(GatewayAdminError) as err:
        admin.create_snapshot(bucket, "s1")
    assert err.value.status == 409 and err.value.code == "InvalidBucketState"
    assert "enable versioning" in err.value.message
    with pytest.raises(GatewayAdminError) as err:
        admin.create_snapshot(bucket, "bad/name")
    assert err.value.status in (400, 404)


def test_held_versions_survive_deletes_and_restore_gives_old_bytes(s3, vbucket, admin):
    old = {"a/one": os.urandom(1000), "a/two": os.urandom(300 << 10), "b": b""}
    vids = {}
    for key, data in old.items():
        vids[key] = s3.put_object(Bucket=vbucket, Key=key, Body=data, ContentType="text/x-test",
                                  Metadata={"origin": key})["VersionId"]
    snap = admin.create_snapshot(vbucket, "s1")
    assert (snap["name"], snap["objects"]) == ("s1", 3) and snap["bytes"] == sum(map(len, old.values()))
    with pytest.raises(GatewayAdminError) as err:
        admin.create_snapshot(vbucket, "s1")
    assert err.value.code == "SnapshotAlreadyExists"

    # later writes: overwrite, plain delete (a marker), a new key
    new_vid = s3.put_object(Bucket=vbucket, Key="a/one", Body=b"new")["VersionId"]
    s3.delete_object(Bucket=vbucket, Key="b")
    s3.put_object(Bucket=vbucket, Key="c", Body=b"after")

    with pytest.raises(ClientError) as err:
        s3.delete_object(Bucket=vbucket, Key="a/one", VersionId=vids["a/one"])
    assert err.value.response["Error"]["Code"] == "AccessDenied"
    assert "held by snapshot s1" in err.value.response["Error"]["Message"]
    out = s3.delete_objects(Bucket=vbucket, Delete={"Objects": [
        {"Key": "a/two", "VersionId": vids["a/two"]}, {"Key": "a/one", "VersionId": new_vid}]})
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("a/two", "AccessDenied")]
    assert [d["Key"] for d in out["Deleted"]] == ["a/one"]  # a version no snapshot holds
    for key, data in old.items():
        assert sha(read(s3, vbucket, key, vids[key])) == sha(data)

    # versioning cannot be suspended while versions are held
    with pytest.raises(ClientError) as err:
        s3.put_bucket_versioning(Bucket=vbucket, VersioningConfiguration={"Status": "Suspended"})
    assert err.value.response["Error"]["Code"] == "InvalidBucketState"
    with pytest.raises(GatewayAdminError) as err:
        admin.set_versioning(vbucket, "Suspended")
    assert err.value.status == 409

    # restore into a new bucket, one key per page
    target = vbucket + "-r"
    admin.create_bucket(target, owner="admin")
    s3.put_object(Bucket=target, Key="junk", Body=b"x")
    with pytest.raises(GatewayAdminError) as err:
        admin.restore_snapshot_page(vbucket, "s1", target)
    assert err.value.code == "BucketNotEmpty"
    s3.delete_object(Bucket=target, Key="junk")
    first = admin.restore_snapshot_page(vbucket, "s1", target, max_keys=1)
    assert (first["copied"], first["done"], first["total"]) == (1, False, 3)
    assert admin.get_bucket(target)["restoring"] == {"bucket": vbucket, "snapshot": "s1"}
    with pytest.raises(GatewayAdminError) as err:  # a restore reads from it
        admin.delete_snapshot(vbucket, "s1")
    assert err.value.code == "InvalidBucketState"
    # a restore cut short and run again from the start skips what it copied
    again = admin.restore_snapshot_page(vbucket, "s1", target, max_keys=10)
    assert (again["skipped"], again["copied"], again["done"]) == (1, 2, True)
    assert admin.get_bucket(target)["restoring"] is None
    listed = {o["Key"] for o in s3.list_objects_v2(Bucket=target)["Contents"]}
    assert listed == set(old)
    for key, data in old.items():
        got = s3.get_object(Bucket=target, Key=key)
        assert sha(got["Body"].read()) == sha(data)
        assert got["ContentType"] == "text/x-test" and got["Metadata"] == {"origin": key}

    # once the snapshot is gone, its versions can be deleted
    assert [s["name"] for s in admin.list_snapshots(vbucket)] == ["s1"]
    admin.delete_snapshot(vbucket, "s1")
    assert admin.list_snapshots(vbucket) == []
    s3.delete_object(Bucket=vbucket, Key="a/one", VersionId=vids["a/one"])
    with pytest.raises(ClientError):
        read(s3, vbucket, "a/one", vids["a/one"])
    s3.put_bucket_versioning(Bucket=vbucket, VersioningConfiguration={"Status": "Suspended"})


def test_snapshot_is_a_consistent_cut_under_concurrent_puts(gateway, vbucket, admin):
    """A writer PUTs seq-00000, seq-00001, ... each after the previous was acknowledged, and
    after each sets ``counter`` to its number: a snapshot holds a prefix of the seq keys and
    the counter of the last or the one before it, never a gap."""
    s3 = gateway.client()
    stop = threading.Event()
    errors = []

    def writer():
        w = gateway.client()
        i = 0
        try:
            while not stop.is_set():
                w.put_object(Bucket=vbucket, Key=f"seq-{i:05d}", Body=str(i).encode())
                w.put_object(Bucket=vbucket, Key="counter", Body=str(i).encode())
                i += 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for n in range(6):
            time.sleep(0.15)
            admin.create_snapshot(vbucket, f"cut-{n}")
    finally:
        stop.set()
        t.join()
    assert not errors
    seen = set()
    for n in range(6):
        entries, after = [], ""
        while True:
            page = admin.get_snapshot(vbucket, f"cut-{n}", entries=True, after=after, max_keys=200)
            entries += page["entries"]
            if len(page["entries"]) < 200:
                break
            after = page["entries"][-1]["key"]
        keys = [e["key"] for e in entries if e["key"].startswith("seq-")]
        assert keys == [f"seq-{i:05d}" for i in range(len(keys))], f"cut-{n} has a gap"
        counter = [e for e in entries if e["key"] == "counter"]
        if keys:
            value = int(read(s3, vbucket, "counter", counter[0]["version_id"]))
            assert value in (len(keys) - 1, len(keys) - 2), (value, len(keys))
        seen.add(len(keys))
    assert len(seen) > 1  # the snapshots really were taken while writes went on


def test_lifecycle_leaves_held_noncurrent_versions_and_holds_survive_a_crash():
    workdir = tempfile.mkdtemp(prefix="strata-test-")
    gw = GatewayProcess(workdir, lifecycle_day_seconds=0.2, lifecycle_interval=3600)
    try:
        gw.start()
        s3, admin = gw.client(), GatewayAdminClient(gw.endpoint, ADMIN_TOKEN)
        s3.create_bucket(Bucket="lcb")
        s3.put_bucket_versioning(Bucket="lcb", VersioningConfiguration={"Status": "Enabled"})
        held = s3.put_object(Bucket="lcb", Key="k", Body=b"v1")["VersionId"]
        admin.create_snapshot("lcb", "keep")
        free = s3.put_object(Bucket="lcb", Key="k", Body=b"v2")["VersionId"]
        s3.put_object(Bucket="lcb", Key="k", Body=b"v3")
        s3.put_bucket_lifecycle_configuration(Bucket="lcb", LifecycleConfiguration={"Rules": [{
            "ID": "nc", "Status": "Enabled", "Filter": {"Prefix": ""},
            "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]})
        time.sleep(0.5)
        stats = admin.apply_lifecycle()
        assert stats["versions_removed"] == 1 and stats["held"] == 1, stats
        versions = {v["VersionId"] for v in s3.list_object_versions(Bucket="lcb")["Versions"]}
        assert held in versions and free not in versions
        assert read(s3, "lcb", "k", held) == b"v1" and read(s3, "lcb", "k") == b"v3"

        # the snapshot and its hold are durable: a restarted gateway still refuses
        gw.kill9()
        gw.start()
        s3 = gw.client()
        assert [x["name"] for x in admin.list_snapshots("lcb")] == ["keep"]
        with pytest.raises(ClientError) as err:
            s3.delete_object(Bucket="lcb", Key="k", VersionId=held)
        assert "held by snapshot keep" in err.value.response["Error"]["Message"]
    finally:
        gw.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_change_feed_lists_writes_in_order_up_to_its_horizon(s3, vbucket, admin):
    first = admin.changes(vbucket, 0)
    assert first["changes"] == [] and not first["truncated"]
    v1 = s3.put_object(Bucket=vbucket, Key="x", Body=b"1")["VersionId"]
    v2 = s3.put_object(Bucket=vbucket, Key="y", Body=b"22")["VersionId"]
    marker = s3.delete_object(Bucket=vbucket, Key="x")["VersionId"]
    feed = admin.changes(vbucket, first["horizon"])
    assert [(c["key"], c["version_id"], c["marker"]) for c in feed["changes"]] == [
        ("x", v1, False), ("y", v2, False), ("x", marker, True)]
    page = admin.changes(vbucket, first["horizon"], limit=2)
    assert page["truncated"] and page["horizon"] == feed["changes"][1]["seq"]
    assert page["upto"] >= feed["changes"][2]["seq"]
    assert [c["key"] for c in admin.changes(vbucket, page["horizon"])["changes"]] == ["x"]
    assert admin.changes(vbucket, feed["horizon"])["changes"] == []
