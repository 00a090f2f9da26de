"""The admin interface through services.object.admin_client, and per-bucket quotas."""
from __future__ import annotations

import json
import os
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from services.object.admin_client import GatewayAdminClient, GatewayAdminError
from services.object.tests.gatewayproc import ADMIN_TOKEN, USER_ACCESS, USER_SECRET, GatewayProcess


@pytest.fixture
def admin(gateway):
    return GatewayAdminClient(gateway.endpoint, ADMIN_TOKEN)


def test_admin_bucket_crud_and_usage(gateway, admin):
    name = f"adm-{uuid.uuid4().hex[:8]}"
    assert admin.health()["status"] == "ok"
    created = admin.create_bucket(name, owner="alice", versioning="Enabled")
    assert created["owner"] == "alice" and created["versioning"] == "Enabled" and created["objects"] == 0
    alice = gateway.client(USER_ACCESS, USER_SECRET)
    alice.put_object(Bucket=name, Key="a", Body=b"12345")
    alice.put_object(Bucket=name, Key="a", Body=b"1234567")
    info = admin.get_bucket(name)
    assert (info["bytes"], info["objects"]) == (12, 2)  # both versions are stored
    assert name in [b["name"] for b in admin.list_buckets()]
    with pytest.raises(GatewayAdminError) as e:
        admin.create_bucket(name, owner="bob")
    assert e.value.code == "BucketAlreadyExists" and e.value.status == 409
    with pytest.raises(GatewayAdminError) as e:
        admin.delete_bucket(name)
    assert e.value.code == "BucketNotEmpty"
    assert admin.set_versioning(name, "Suspended") == "Suspended"
    assert admin.get_versioning(name) == "Suspended"
    for v in alice.list_object_versions(Bucket=name)["Versions"]:
        alice.delete_object(Bucket=name, Key="a", VersionId=v["VersionId"])
    assert admin.get_bucket(name)["objects"] == 0
    admin.delete_bucket(name)
    with pytest.raises(GatewayAdminError) as e:
        admin.get_bucket(name)
    assert e.value.code == "NoSuchBucket" and e.value.status == 404
    with pytest.raises(GatewayAdminError) as e:
        admin.create_bucket("Bad_Name", owner="alice")
    assert e.value.code == "InvalidBucketName"


def test_admin_needs_the_token(gateway):
    with pytest.raises(GatewayAdminError) as e:
        GatewayAdminClient(gateway.endpoint, "wrong").list_buckets()
    assert e.value.status == 403


def test_quota_bytes_and_objects(gateway, admin, s3):
    name = f"quota-{uuid.uuid4().hex[:8]}"
    admin.create_bucket(name, owner="admin")
    assert admin.set_quota(name, bytes=1000, objects=3) == {"bytes": 1000, "objects": 3}
    assert admin.get_quota(name) == {"bytes": 1000, "objects": 3}
    s3.put_object(Bucket=name, Key="one", Body=b"x" * 600)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=name, Key="two", Body=b"x" * 600)
    assert e.value.response["Error"]["Code"] == "QuotaExceeded"
    s3.put_object(Bucket=name, Key="two", Body=b"x" * 100)
    s3.put_object(Bucket=name, Key="three", Body=b"x" * 100)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=name, Key="four", Body=b"x")
    assert e.value.response["Error"]["Code"] == "QuotaExceeded"
    s3.delete_object(Bucket=name, Key="one")
    s3.put_object(Bucket=name, Key="four", Body=b"x")
    admin.set_quota(name)  # lift it
    s3.put_object(Bucket=name, Key="big", Body=b"x" * 5000)
    assert admin.get_bucket(name)["bytes"] == 100 + 100 + 1 + 5000


def test_segment_compaction_keeps_live_objects(tmp_path):
    """Small objects in closed segments survive compaction; dead segments are deleted."""
    gw = GatewayProcess(str(tmp_path), segment_bytes=256 * 1024, compaction_interval=3600)
    try:
        gw.start()
        s3 = gw.client()
        s3.create_bucket(Bucket="compact")
        payload = {f"k{i:03d}": os.urandom(20_000 + i) for i in range(60)}
        for key, data in payload.items():
            s3.put_object(Bucket="compact", Key=key, Body=data)
        for i, key in enumerate(list(payload)):
            if i % 3:  # two thirds die: overwritten or deleted
                if i % 2:
                    s3.delete_object(Bucket="compact", Key=key)
                    del payload[key]
                else:
                    payload[key] = os.urandom(10_000)
                    s3.put_object(Bucket="compact", Key=key, Body=payload[key])
        seg_dir = os.path.join(gw.data_root, "segments")
        before = sorted(os.listdir(seg_dir))
        stats = GatewayAdminClient(gw.endpoint, ADMIN_TOKEN)._call("POST", "compact")
        assert stats["segments_removed"] >= 1 and stats["objects_moved"] >= 1
        after = sorted(os.listdir(seg_dir))
        assert len(after) < len(before) + 1 and set(before) != set(after)
        for key, data in payload.items():
            assert s3.get_object(Bucket="compact", Key=key)["Body"].read() == data
        gw.stop()
        gw.start()  # and after a restart
        s3 = gw.client()
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket="compact")["Contents"]]
        assert listed == sorted(payload)
        for key, data in payload.items():
            assert s3.get_object(Bucket="compact", Key=key)["Body"].read() == data
    finally:
        gw.stop()


def test_bucket_policy_grants_and_denies(gateway, s3):
    name = f"pol-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="public/a", Body=b"a")
    s3.put_object(Bucket=name, Key="private/b", Body=b"b")
    alice = gateway.client(USER_ACCESS, USER_SECRET)
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=name, Key="public/a")
    assert e.value.response["Error"]["Code"] == "AccessDenied"
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": ["alice"]}, "Action": ["s3:GetObject", "s3:ListBucket"],
         "Resource": [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/public/*"]},
        {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{name}/public/*"}]}
    s3.put_bucket_policy(Bucket=name, Policy=json.dumps(policy))
    assert json.loads(s3.get_bucket_policy(Bucket=name)["Policy"])["Statement"][0]["Effect"] == "Allow"
    assert alice.get_object(Bucket=name, Key="public/a")["Body"].read() == b"a"
    assert len(alice.list_objects_v2(Bucket=name)["Contents"]) == 2
    for call in (lambda: alice.get_object(Bucket=name, Key="private/b"),
                 lambda: alice.put_object(Bucket=name, Key="public/new", Body=b"x")):
        with pytest.raises(ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == "AccessDenied"
    # the deny binds the owner too (admin keys bypass policies, so use an owner that is not admin)
    own = f"alp-{uuid.uuid4().hex[:8]}"
    alice.create_bucket(Bucket=own)
    alice.put_object(Bucket=own, Key="keep", Body=b"k")
    alice.put_bucket_policy(Bucket=own, Policy=json.dumps({"Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{own}/*"}]}))
    with pytest.raises(ClientError) as e:
        alice.delete_object(Bucket=own, Key="keep")
    assert e.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_policy(Bucket=name, Policy="{not json")
    assert e.value.response["Error"]["Code"] == "MalformedPolicy"
    s3.delete_bucket_policy(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_policy(Bucket=name)
    assert e.value.response["Error"]["Code"] == "NoSuchBucketPolicy"


def test_orphaned_large_files_are_collected(gateway, admin, s3):
    name = f"orph-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    data = os.urandom(300_000)
    s3.put_object(Bucket=name, Key="live", Body=data)
    sub = os.path.join(gateway.data_root, "buckets", name, "data", "zz")
    os.makedirs(sub, exist_ok=True)
    orphan = os.path.join(sub, "zz-orphan")
    with open(orphan, "wb") as fh:
        fh.write(b"x" * 1000)
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    stats = admin._call("POST", "gc?min_age=60")
    assert stats["files_removed"] >= 1 and not os.path.exists(orphan)
    assert s3.get_object(Bucket=name, Key="live")["Body"].read() == data
