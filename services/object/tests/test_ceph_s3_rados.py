"""S3 buckets stored in RADOS (issue 36): two gateway processes on one pool of the session's
Ceph cluster, as two nodes, serve the same buckets with one view.

Each gateway is ``python -m services.object.gateway`` with ``"store": {"kind": "rados", ...}``
in its config; the clients are boto3.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from services.object.tests.gatewayproc import USER_ACCESS, USER_SECRET, GatewayProcess


@pytest.fixture(scope="module")
def pool(ceph_cluster):
    """A replicated RADOS pool of its own (deleted after the module)."""
    name = f"strata-s3-test-{uuid.uuid4().hex[:6]}"
    ceph_cluster.command("osd pool create", pool=name, pg_num=8)
    ceph_cluster.command("osd pool application enable", pool=name, app="rgw")
    yield {"kind": "rados", "ceph_conf": str(ceph_cluster.conf), "client": ceph_cluster.client,
           "keyring": str(ceph_cluster.keyring), "pool": name, "index_shards": 4}
    ceph_cluster.command("osd pool delete", pool=name, pool2=name, yes_i_really_really_mean_it=True)


def _gateway(store: dict, workers: int = 1) -> GatewayProcess:
    return GatewayProcess(tempfile.mkdtemp(prefix="strata-test-rados-"), workers=workers, store=store)


@pytest.fixture(scope="module")
def gateways(pool):
    """Two started gateways on the pool, the second of two worker processes (stopped and
    their directories removed after)."""
    gws = [_gateway(pool), _gateway(pool, workers=2)]
    try:
        for g in gws:
            g.start(timeout=60)
        yield gws
    finally:
        for g in gws:
            g.stop()
            shutil.rmtree(g.workdir, ignore_errors=True)


@pytest.fixture()
def bucket(gateways):
    name = f"b-{uuid.uuid4().hex[:10]}"
    gateways[0].client().create_bucket(Bucket=name)
    return name


def _code(exc: ClientError) -> str:
    return exc.response["Error"]["Code"]


def _pool_objects(store: dict) -> set[str]:
    import rados
    cluster = rados.Rados(conffile=store["ceph_conf"], name="client.admin", conf={"keyring": store["keyring"]})
    cluster.connect(timeout=30)
    try:
        with cluster.open_ioctx(store["pool"]) as io:
            return {o.key for o in io.list_objects()}
    finally:
        cluster.shutdown()


def _bucket_id(store: dict, name: str) -> str:
    import rados
    cluster = rados.Rados(conffile=store["ceph_conf"], name="client.admin", conf={"keyring": store["keyring"]})
    cluster.connect(timeout=30)
    try:
        with cluster.open_ioctx(store["pool"]) as io, rados.ReadOpCtx() as op:
            it, _ = io.get_omap_vals_by_keys(op, (name,))
            io.operate_read_op(op, "strata.buckets")
            return json.loads(dict(it)[name])["id"]
    finally:
        cluster.shutdown()


def test_an_object_put_on_one_gateway_reads_back_at_once_on_the_other(gateways, pool, bucket):
    a, b = (g.client() for g in gateways)
    body = os.urandom(200_000)    # in data objects
    small = b"small body"         # inline in the index op
    a.put_object(Bucket=bucket, Key="dir/big", Body=body)
    a.put_object(Bucket=bucket, Key="dir/small", Body=small)
    assert b.get_object(Bucket=bucket, Key="dir/big")["Body"].read() == body
    assert b.get_object(Bucket=bucket, Key="dir/small")["Body"].read() == small
    ranged = b.get_object(Bucket=bucket, Key="dir/big", Range="bytes=1000-150999")
    assert ranged["Body"].read() == body[1000:151000] and ranged["ContentRange"] == "bytes 1000-150999/200000"
    assert b.head_object(Bucket=bucket, Key="dir/big")["ContentLength"] == len(body)
    in_pool = _pool_objects(pool)
    assert "strata.buckets" in in_pool and any(".index." in o for o in in_pool)
    assert not os.path.exists(os.path.join(gateways[0].data_root, "buckets"))   # nothing local
    listed = b.list_objects_v2(Bucket=bucket, Prefix="dir/")
    assert [o["Key"] for o in listed["Contents"]] == ["dir/big", "dir/small"]
    assert b.list_objects(Bucket=bucket, Delimiter="/")["CommonPrefixes"] == [{"Prefix": "dir/"}]
    assert bucket in [x["Name"] for x in b.list_buckets()["Buckets"]]
    # overwritten on b, deleted on a: both see it
    b.put_object(Bucket=bucket, Key="dir/small", Body=b"v2")
    assert a.get_object(Bucket=bucket, Key="dir/small")["Body"].read() == b"v2"
    b.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "dir/big"})
    assert a.get_object(Bucket=bucket, Key="copy")["Body"].read() == body
    a.delete_object(Bucket=bucket, Key="dir/small")
    with pytest.raises(ClientError) as err:
        b.get_object(Bucket=bucket, Key="dir/small")
    assert _code(err.value) == "NoSuchKey"
    for key in ("dir/big", "copy"):
        b.delete_object(Bucket=bucket, Key=key)
    a.delete_bucket(Bucket=bucket)
    with pytest.raises(ClientError) as err:
        b.head_bucket(Bucket=bucket)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_versions_written_on_both_gateways_list_newest_first(gateways, bucket):
    a, b = (g.client() for g in gateways)
    a.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    ids = []
    for i, client in enumerate((a, b, a)):
        ids.append(client.put_object(Bucket=bucket, Key="k", Body=b"v%d" % i)["VersionId"])
    marker = b.delete_object(Bucket=bucket, Key="k")
    assert marker["DeleteMarker"]
    listing = a.list_object_versions(Bucket=bucket)
    assert [v["VersionId"] for v in listing["Versions"]] == ids[::-1]
    assert [m["VersionId"] for m in listing["DeleteMarkers"]] == [marker["VersionId"]]
    assert listing["DeleteMarkers"][0]["IsLatest"] and not any(v["IsLatest"] for v in listing["Versions"])
    assert b.get_object(Bucket=bucket, Key="k", VersionId=ids[1])["Body"].read() == b"v1"
    a.delete_object(Bucket=bucket, Key="k", VersionId=marker["VersionId"])
    assert b.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"


def test_if_none_match_star_has_exactly_one_winner_across_gateways(gateways, bucket):
    clients = [gateways[i % 2].client() for i in range(8)]
    start = threading.Barrier(8)

    def put(i):
        start.wait()
        try:
            clients[i].put_object(Bucket=bucket, Key="once", Body=b"writer %d" % i, IfNoneMatch="*")
            return 200, i
        except ClientError as exc:
            return exc.response["ResponseMetadata"]["HTTPStatusCode"], i

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(put, range(8)))
    winners = [i for status, i in outcomes if status == 200]
    assert sorted(status for status, _ in outcomes) == [200] + [412] * 7
    for g in gateways:
        assert g.client().get_object(Bucket=bucket, Key="once")["Body"].read() == b"writer %d" % winners[0]


def test_if_match_refuses_a_stale_etag_written_on_the_other_gateway(gateways, bucket):
    a, b = (g.client() for g in gateways)
    first = a.put_object(Bucket=bucket, Key="m", Body=b"one")["ETag"]
    b.put_object(Bucket=bucket, Key="m", Body=b"two", IfMatch=first)
    with pytest.raises(ClientError) as err:
        a.put_object(Bucket=bucket, Key="m", Body=b"three", IfMatch=first)
    assert _code(err.value) == "PreconditionFailed"
    assert a.get_object(Bucket=bucket, Key="m")["Body"].read() == b"two"


def test_multipart_parts_sent_to_both_gateways_complete_on_one_and_read_on_the_other(gateways, pool, bucket):
    a, b = (g.client() for g in gateways)
    bucket_id = _bucket_id(pool, bucket)
    up = a.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    parts, whole = [], b""
    for n in range(1, 4):
        data = os.urandom(5 * 1024 * 1024 if n < 3 else 123_457)
        whole += data
        client = a if n % 2 else b
        etag = client.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=n, Body=data)["ETag"]
        parts.append({"PartNumber": n, "ETag": etag})
    assert [p["PartNumber"] for p in b.list_parts(Bucket=bucket, Key="mp", UploadId=up)["Parts"]] == [1, 2, 3]
    assert [u["UploadId"] for u in a.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [up]
    done = a.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    assert done["ETag"].endswith('-3"')
    got = b.get_object(Bucket=bucket, Key="mp")["Body"].read()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(whole).hexdigest()
    assert "Uploads" not in b.list_multipart_uploads(Bucket=bucket)
    # a part sent after the upload completed is refused
    with pytest.raises(ClientError) as err:
        b.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=4, Body=b"late")
    assert _code(err.value) == "NoSuchUpload"
    # an upload left open goes with its bucket: parts and upload objects leave the pool
    left = a.create_multipart_upload(Bucket=bucket, Key="left")["UploadId"]
    b.upload_part(Bucket=bucket, Key="left", UploadId=left, PartNumber=1, Body=b"p" * 100_000)
    b.delete_object(Bucket=bucket, Key="mp")
    a.delete_bucket(Bucket=bucket)
    assert not [o for o in _pool_objects(pool) if o.startswith(bucket_id)]


def test_a_bucket_policy_put_on_one_gateway_holds_on_the_other_at_once(gateways, bucket):
    a, b = gateways[0].client(), gateways[1].client()
    alice = gateways[1].client(USER_ACCESS, USER_SECRET)
    a.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": ["alice"]}, "Action": ["s3:GetObject", "s3:PutObject"],
        "Resource": [f"arn:aws:s3:::{bucket}/*"]}]}))
    alice.put_object(Bucket=bucket, Key="by-alice", Body=b"x")
    a.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Deny", "Principal": {"AWS": ["alice"]}, "Action": ["s3:*"],
        "Resource": [f"arn:aws:s3:::{bucket}/*"]}]}))
    with pytest.raises(ClientError) as err:   # the very next request on the other gateway
        alice.get_object(Bucket=bucket, Key="by-alice")
    assert _code(err.value) == "AccessDenied"
    assert b.get_bucket_policy(Bucket=bucket)["Policy"].count("Deny") == 1


def test_features_not_built_on_rados_answer_not_implemented(gateways, bucket):
    a = gateways[0].client()
    with pytest.raises(ClientError) as err:
        a.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
            {"ID": "x", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 1}}]})
    assert _code(err.value) == "NotImplemented" and "RADOS" in err.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as err:
        a.put_object(Bucket=bucket, Key="enc", Body=b"x", ServerSideEncryption="AES256")
    assert _code(err.value) == "NotImplemented"
    with pytest.raises(ClientError) as err:
        a.get_object(Bucket=bucket, Key="enc")
    assert _code(err.value) == "NoSuchKey"


def test_object_lock_retention_set_on_one_gateway_refuses_a_delete_on_the_other(gateways):
    a, b = (g.client() for g in gateways)
    name = f"lock-{uuid.uuid4().hex[:10]}"
    a.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    vid = a.put_object(Bucket=name, Key="kept", Body=b"worm")["VersionId"]
    a.put_object_retention(Bucket=name, Key="kept", VersionId=vid, Retention={
        "Mode": "COMPLIANCE", "RetainUntilDate": "2099-01-01T00:00:00Z"})
    assert b.get_object_retention(Bucket=name, Key="kept", VersionId=vid)["Retention"]["Mode"] == "COMPLIANCE"
    with pytest.raises(ClientError) as err:
        b.delete_object(Bucket=name, Key="kept", VersionId=vid)
    assert _code(err.value) == "AccessDenied"
    assert b.get_object(Bucket=name, Key="kept", VersionId=vid)["Body"].read() == b"worm"


def test_every_acknowledged_put_reads_back_after_a_gateway_is_killed(gateways, pool, bucket):
    victim = _gateway(pool).start(timeout=60)
    try:
        c = victim.client()
        acked: dict[str, str] = {}
        stop = threading.Event()

        def loop():
            i = 0
            while not stop.is_set():
                body = os.urandom(100_000 if i % 2 else 1000)
                try:
                    c.put_object(Bucket=bucket, Key=f"k{i}", Body=body)
                except Exception:  # noqa: BLE001 - the gateway died under it
                    return
                acked[f"k{i}"] = hashlib.md5(body).hexdigest()
                i += 1

        t = threading.Thread(target=loop)
        t.start()
        time.sleep(3)
        victim.kill9()
        stop.set()
        t.join(30)
    finally:
        victim.stop()
        shutil.rmtree(victim.workdir, ignore_errors=True)
    assert len(acked) > 5
    other = gateways[1].client()
    for key, md5 in acked.items():
        assert hashlib.md5(other.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest() == md5


def test_puts_go_on_while_an_osd_is_killed_and_every_acknowledged_object_reads_back(ceph_cluster, gateways,
                                                                                     bucket):
    """The pool keeps 3 copies (2 needed to write): an OSD killed -9 during a PUT loop stalls
    writes until the monitors mark it down, then they go on; every acknowledged object reads
    back through the other gateway, during the failure and after the OSD is back."""
    c = gateways[0].client()
    acked: dict[str, str] = {}
    errors: list = []
    stop = threading.Event()

    def loop():
        i = 0
        while not stop.is_set():
            body = os.urandom(100_000 if i % 2 else 1000)
            try:
                c.put_object(Bucket=bucket, Key=f"o{i}", Body=body)
            except Exception as exc:  # noqa: BLE001 - recorded: a PUT must not fail, only wait
                errors.append(exc)
            else:
                acked[f"o{i}"] = hashlib.md5(body).hexdigest()
            i += 1

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        ceph_cluster.kill_osd(1)
        before = len(acked)
        deadline = time.monotonic() + 150
        while len(acked) < before + 10 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(acked) >= before + 10, f"{len(acked) - before} PUTs acknowledged with osd.1 down"
    finally:
        stop.set()
        thread.join(120)
        ceph_cluster.start_osd(1)
    assert not errors, errors
    other = gateways[1].client()
    for key, md5 in acked.items():
        assert hashlib.md5(other.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest() == md5
    ceph_cluster.wait_healthy(timeout=180)
    for key, md5 in list(acked.items())[::7]:
        assert hashlib.md5(other.get_object(Bucket=bucket, Key=key)["Body"].read()).hexdigest() == md5
