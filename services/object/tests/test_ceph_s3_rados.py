"""S3 buckets stored in RADOS (issue 36): two gateway processes on one pool of the session's
Ceph cluster, as two nodes, serve the same buckets with one view.

Each gateway is ``python -m services.object.gateway`` with ``"store": {"kind": "rados", ...}``
in its config; the clients are boto3.
"""
from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import tempfile
import threading
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
import requests
from botocore.exceptions import ClientError

from services.object.admin_client import GatewayAdminClient
from services.object.tests.gatewayproc import ADMIN_TOKEN, USER_ACCESS, USER_SECRET, GatewayProcess
from tests.kit import wait_for


@pytest.fixture(scope="module")
def pool(ceph_cluster):
    """A replicated RADOS pool of its own (deleted after the module)."""
    name = f"strata-s3-test-{uuid.uuid4().hex[:6]}"
    ceph_cluster.command("osd pool create", pool=name, pg_num=8)
    ceph_cluster.command("osd pool application enable", pool=name, app="rgw")
    yield {"kind": "rados", "ceph_conf": str(ceph_cluster.conf), "client": ceph_cluster.client,
           "keyring": str(ceph_cluster.keyring), "pool": name, "index_shards": 4}
    ceph_cluster.command("osd pool delete", pool=name, pool2=name, yes_i_really_really_mean_it=True)


# an SSE-KMS key as the plane gives it to every gateway (material, alias), the same on both
KMS_KEY = "ckpt-key"
KMS_KEYS = {KMS_KEY: {"material": base64.b64encode(b"k" * 32).decode(), "enabled": True,
                      "aliases": ["alias/ckpt"], "arn": ""}}
MIB = 1024 * 1024


def _gateway(store: dict, workers: int = 1, **settings) -> GatewayProcess:
    return GatewayProcess(tempfile.mkdtemp(prefix="strata-test-rados-"), workers=workers, store=store,
                          kms_keys=KMS_KEYS, **settings)


@contextmanager
def _running(gws: list[GatewayProcess]):
    """The gateways started; stopped and their directories removed after."""
    try:
        for g in gws:
            g.start(timeout=60)
        yield gws
    finally:
        for g in gws:
            g.stop()
            shutil.rmtree(g.workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def gateways(pool):
    """Two started gateways on the pool, the second of two worker processes."""
    with _running([_gateway(pool), _gateway(pool, workers=2)]) as gws:
        yield gws


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


# keys S3 orders by their UTF-8 bytes: control bytes around the index's own separator (\x01),
# '/', DEL, and characters of two, three and four bytes
ODD_KEYS = ["a", "a\x01", "a\x01\x01", "a\x01b", "a\x01/c", "a\x02", "a\x1f", "a!", "a/", "a/b", "a/b\x01c",
            "a/\x01", "a/c/d", "a0", "a\x7f", "ab", "b\x01/x", "b/x", "b\x7f", "\x01start", "\x02",
            "é", "é\x01", "é/1", "日本/語", "日本\x01", "😀", "😀/x", "\U0010fffd", "~"]


def _pages(call, token_in: str, token_out: str, **kw) -> list[dict]:
    """Every page of a listing, following the store's own marker or continuation token."""
    pages = [call(**kw)]
    while pages[-1].get("IsTruncated"):
        extra = {name: pages[-1][out] for name, out in zip(token_in.split(","), token_out.split(","))
                 if pages[-1].get(out) is not None}
        pages.append(call(**{**kw, **extra}))
    return pages


def _listings(client, bucket: str) -> dict:
    """What a client sees of a bucket's listings (keys, prefixes, latest flags, sizes and page
    boundaries; no version ids, which differ between stores), in the order the server gave."""
    out = {}
    for max_keys in (1000, 3):
        for prefix, delimiter in (("", ""), ("", "/"), ("a", "/"), ("a", "\x01"), ("a\x01", ""), ("é", "/"),
                                  ("", "\x01"), ("日本", "")):
            args = dict(Bucket=bucket, Prefix=prefix, Delimiter=delimiter, MaxKeys=max_keys)
            name = f"{max_keys} {prefix!r} {delimiter!r}"
            out[f"v2 {name}"] = [([o["Key"] for o in p.get("Contents", [])],
                                  [c["Prefix"] for c in p.get("CommonPrefixes", [])])
                                 for p in _pages(client.list_objects_v2, "ContinuationToken", "NextContinuationToken",
                                                 **args)]
            if "\x01" not in prefix:   # v1 echoes the prefix unencoded (&#x1;, as S3): botocore refuses it
                out[f"v1 {name}"] = [([o["Key"] for o in p.get("Contents", [])],
                                      [c["Prefix"] for c in p.get("CommonPrefixes", [])], p.get("NextMarker"))
                                     for p in _pages(client.list_objects, "Marker", "NextMarker", **args)]
            out[f"versions {name}"] = [
                ([(v["Key"], v["IsLatest"], v["Size"]) for v in p.get("Versions", [])],
                 [(m["Key"], m["IsLatest"]) for m in p.get("DeleteMarkers", [])],
                 [c["Prefix"] for c in p.get("CommonPrefixes", [])], p.get("NextKeyMarker"))
                for p in _pages(client.list_object_versions, "KeyMarker,VersionIdMarker",
                                "NextKeyMarker,NextVersionIdMarker", **args)]
        for start in ("a\x01", "a\x01\x01", "a/", "é", "a"):
            out[f"v2 start-after {max_keys} {start!r}"] = [
                [o["Key"] for o in p.get("Contents", [])]
                for p in _pages(client.list_objects_v2, "ContinuationToken", "NextContinuationToken",
                                Bucket=bucket, StartAfter=start, MaxKeys=max_keys)]
            out[f"v1 marker {max_keys} {start!r}"] = [
                [o["Key"] for o in p.get("Contents", [])]
                for p in _pages(client.list_objects, "Marker", "NextMarker", Bucket=bucket, Marker=start,
                                MaxKeys=max_keys, Delimiter="/")]
            out[f"versions key-marker {max_keys} {start!r}"] = [
                [(v["Key"], v["Size"]) for v in p.get("Versions", [])]
                for p in _pages(client.list_object_versions, "KeyMarker,VersionIdMarker",
                                "NextKeyMarker,NextVersionIdMarker", Bucket=bucket, KeyMarker=start,
                                MaxKeys=max_keys)]
    return out


def test_odd_keys_list_in_the_same_order_as_on_a_local_bucket(gateways, bucket):
    """Keys holding \\x01 (the index's separator), other control bytes, '/' and multi-byte
    characters, with several versions and delete markers: every ListObjects v1/v2 and
    ListObjectVersions (prefixes, delimiters, markers, pages of 3) answers on a RADOS bucket
    exactly what it answers on a local bucket."""
    with GatewayProcess.running() as local:
        stores = [(gateways[0].client(), bucket), (local.client(), "local-odd-keys")]
        stores[1][0].create_bucket(Bucket=stores[1][1])
        for client, name in stores:
            client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
            for i, key in enumerate(ODD_KEYS):
                for v in range(1 + i % 3):   # 1 to 3 versions of each key
                    client.put_object(Bucket=name, Key=key, Body=b"x" * (i * 10 + v))
            for key in ("a\x01b", "é", "a/"):
                client.delete_object(Bucket=name, Key=key)   # a delete marker on top
            client.delete_object(Bucket=name, Key="a\x01")   # and one under a newer version
            client.put_object(Bucket=name, Key="a\x01", Body=b"back")
        on_rados, on_local = (_listings(c, name) for c, name in stores)
        assert [o for p in on_local["v2 1000 '' ''"] for o in p[0]] == sorted(
            k for k in ODD_KEYS if k not in ("a\x01b", "é", "a/"))   # the reference is S3's order
        for name in on_local:
            assert on_rados[name] == on_local[name], name
        # one key's versions are its own, not those of longer keys that start with it and \x01
        other = gateways[1].client()
        assert len(other.list_object_versions(Bucket=bucket, Prefix="a\x01")["Versions"]) == 3 + 3 + 1 + 2
        versions = [v for v in other.list_object_versions(Bucket=bucket, Prefix="a")["Versions"] if v["Key"] == "a\x01"]
        assert [v["Size"] for v in versions] == [4, 11, 10]
        assert other.get_object(Bucket=bucket, Key="a\x01")["Body"].read() == b"back"
        # open multipart uploads of such keys list with their keys, in the same order (raw XML:
        # botocore's parser refuses the character reference S3 writes for \x01)
        listed = []
        for client, name in stores:
            for key in ("a\x01b", "a", "a\x01", "a\x01\x01", "é\x01", "a/b", "a\x02"):
                assert requests.post(client.generate_presigned_url(
                    "create_multipart_upload", Params={"Bucket": name, "Key": key})).status_code == 200
            listed.append([re.findall(r"<Key>(.*?)</Key>", requests.get(client.generate_presigned_url(
                "list_multipart_uploads", Params={"Bucket": name, **page})).text)
                for page in ({}, {"Prefix": "a\x01"}, {"MaxUploads": 3}, {"KeyMarker": "a\x01"})])
        assert listed[0] == listed[1]
        assert listed[0][1] == ["a&#x1;", "a&#x1;&#x1;", "a&#x1;b"]


def test_puts_racing_delete_bucket_on_the_other_gateway_leave_nothing_behind(gateways, pool):
    """PUT loops on one gateway while the other empties and deletes the bucket (again and
    again until it goes): each PUT either succeeded before the delete (it was then in the
    bucket, and the delete said BucketNotEmpty) or answered NoSuchBucket; no acknowledged
    object outlives a successful delete unseen, and nothing of the deleted bucket is left in
    the pool (index, settings, data objects). After 5 refusals the loops start no new PUT
    (those in flight still race the delete): on a loaded machine the deleter's list, delete
    and DeleteBucket took longer than the loops' gaps, and it never won in 60 s."""
    a, b = (g.client() for g in gateways)
    name = f"race-{uuid.uuid4().hex[:8]}"
    for round_ in range(3):
        b.create_bucket(Bucket=name)
        bid = _bucket_id(pool, name)
        acked: set[str] = set()
        others: list = []
        gone, hold = threading.Event(), threading.Event()

        def loop(t: int):
            i = 0
            while not gone.is_set():
                if hold.is_set():       # the deleter asked for a gap
                    time.sleep(0.01)
                    continue
                key = f"t{t}-{i}"
                try:   # bodies in data objects and inline
                    a.put_object(Bucket=name, Key=key, Body=os.urandom(100_000 if i % 2 else 1000))
                    acked.add(key)
                except ClientError as exc:
                    if _code(exc) != "NoSuchBucket":
                        others.append(exc)
                    return
                i += 1
                time.sleep(0.005 * (i % 7))   # now and then a gap the delete can win

        threads = [threading.Thread(target=loop, args=(t,)) for t in range(2)]
        for t in threads:
            t.start()
        removed: set[str] = set()
        refused = 0
        try:
            time.sleep(0.3)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                keys = [o["Key"] for p in b.get_paginator("list_objects_v2").paginate(Bucket=name)
                        for o in p.get("Contents", [])]
                for start in range(0, len(keys), 1000):
                    b.delete_objects(Bucket=name, Delete={"Objects": [{"Key": k} for k in keys[start:start + 1000]]})
                removed.update(keys)
                try:
                    b.delete_bucket(Bucket=name)
                    break
                except ClientError as exc:
                    assert _code(exc) == "BucketNotEmpty", exc
                    refused += 1
                    if refused >= 5:
                        hold.set()
            else:
                pytest.fail("the bucket was never deleted")
        finally:
            gone.set()
            for t in threads:
                t.join(60)
        assert not others, others
        assert acked <= removed, f"acknowledged and never seen by the deleter: {sorted(acked - removed)[:5]}"
        left = sorted(o for o in _pool_objects(pool) if o.startswith(bid + "."))
        assert not left, left
        print(f"round {round_}: {len(acked)} PUTs acknowledged, {refused} DeleteBucket refused BucketNotEmpty")


def _data_objects(store: dict, bucket_id: str) -> set[str]:
    return {o for o in _pool_objects(store) if o.startswith(f"{bucket_id}.d.")}


def test_the_sweep_removes_what_a_gateway_killed_mid_put_left_and_nothing_named(gateways, pool, bucket):
    """A gateway killed -9 while a 64 MiB PUT streams into data objects leaves them named by
    no entry; the sweep keeps them while young, then removes exactly them: the objects, the
    open multipart upload's part and what they name read back whole."""
    a, b = (g.client() for g in gateways)
    bid = _bucket_id(pool, bucket)
    kept = os.urandom(9 * MIB)
    a.put_object(Bucket=bucket, Key="kept", Body=kept)
    a.put_object(Bucket=bucket, Key="small", Body=b"inline")
    upload = a.create_multipart_upload(Bucket=bucket, Key="mpu")["UploadId"]
    part = os.urandom(5 * MIB)
    etag = a.upload_part(Bucket=bucket, Key="mpu", UploadId=upload, PartNumber=1, Body=part)["ETag"]
    named = _data_objects(pool, bid)
    assert len(named) == 3 + 2
    victim = _gateway(pool).start(timeout=60)
    try:
        url = urllib.parse.urlsplit(victim.client().generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": "lost"}, ExpiresIn=600))
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        conn.putrequest("PUT", f"{url.path}?{url.query}")
        conn.putheader("Content-Length", str(64 * MIB))
        conn.endheaders()
        for _ in range(16):
            conn.send(os.urandom(MIB))
        deadline = time.monotonic() + 30
        while len(_data_objects(pool, bid) - named) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        victim.kill9()
        conn.close()
    finally:
        victim.stop()
        shutil.rmtree(victim.workdir, ignore_errors=True)
    orphans = _data_objects(pool, bid) - named
    assert len(orphans) >= 2
    admin = [GatewayAdminClient(g.endpoint, ADMIN_TOKEN, timeout=120) for g in gateways]
    young = admin[1].collect_orphans()   # the default grace: an hour
    assert young["data_objects_removed"] == 0 and young["young_kept"] >= len(orphans)
    assert _data_objects(pool, bid) == named | orphans
    with ThreadPoolExecutor(2) as pool_:   # both gateways at once: one sweeps, then the other
        results = list(pool_.map(lambda c: c.collect_orphans(0), admin))
    assert sum(r["data_objects_removed"] for r in results) >= len(orphans), results
    assert _data_objects(pool, bid) == named
    assert b.get_object(Bucket=bucket, Key="kept")["Body"].read() == kept
    assert b.get_object(Bucket=bucket, Key="small")["Body"].read() == b"inline"
    with pytest.raises(ClientError) as err:
        b.head_object(Bucket=bucket, Key="lost")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    b.complete_multipart_upload(Bucket=bucket, Key="mpu", UploadId=upload,
                                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert hashlib.sha256(a.get_object(Bucket=bucket, Key="mpu")["Body"].read()).digest() == hashlib.sha256(part).digest()


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
        a.restore_object(Bucket=bucket, Key="x", RestoreRequest={"Days": 1})
    assert _code(err.value) == "NotImplemented" and "RADOS" in err.value.response["Error"]["Message"]


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


# -- lifecycle: rules shared as a bucket setting, passes under the pool's RADOS lock ---------

@pytest.fixture(scope="module")
def lc_gateways(pool):
    """Two gateways on the pool whose lifecycle "day" lasts one second and that run passes
    only when asked (the admin interface)."""
    with _running([_gateway(pool, lifecycle_day_seconds=1, lifecycle_interval=0) for _ in range(2)]) as gws:
        yield gws


@pytest.fixture()
def lc_bucket(lc_gateways):
    """A versioned bucket whose rules are removed after the test (a pass covers every bucket
    of the pool: a later test's counts are its own)."""
    name = f"lc-{uuid.uuid4().hex[:10]}"
    s3 = lc_gateways[0].client()
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    yield name
    s3.delete_bucket_lifecycle(Bucket=name)


def _pass(gw) -> dict:
    return GatewayAdminClient(gw.endpoint, ADMIN_TOKEN, timeout=120).apply_lifecycle()


def test_lifecycle_rules_put_on_one_gateway_hold_on_the_other_and_transitions_are_refused(lc_gateways,
                                                                                       lc_bucket):
    a, b = (g.client() for g in lc_gateways)
    with pytest.raises(ClientError) as err:
        b.get_bucket_lifecycle_configuration(Bucket=lc_bucket)
    assert _code(err.value) == "NoSuchLifecycleConfiguration"
    a.put_bucket_lifecycle_configuration(Bucket=lc_bucket, LifecycleConfiguration={"Rules": [
        {"ID": "tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 3}},
        {"Status": "Enabled", "Filter": {"Prefix": ""}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]})
    rules = b.get_bucket_lifecycle_configuration(Bucket=lc_bucket)["Rules"]
    assert rules[0]["ID"] == "tmp" and len(rules[1]["ID"]) == 48   # named as S3 names a rule without one
    b.put_object(Bucket=lc_bucket, Key="tmp/x", Body=b"x")
    assert 'rule-id="tmp"' in a.head_object(Bucket=lc_bucket, Key="tmp/x")["Expiration"]
    # RADOS buckets have no capacity tier: a Transition is refused, naming why; the rules stay
    for rule in ({"Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]},
                 {"NoncurrentVersionTransitions": [{"NoncurrentDays": 1, "StorageClass": "STANDARD_IA"}]}):
        with pytest.raises(ClientError) as err:
            a.put_bucket_lifecycle_configuration(Bucket=lc_bucket, LifecycleConfiguration={"Rules": [
                {"ID": "t", "Status": "Enabled", "Filter": {"Prefix": ""}, **rule}]})
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert _code(err.value) == "InvalidStorageClass"
        message = err.value.response["Error"]["Message"]
        assert "RADOS" in message and "capacity tier" in message
    assert [r["ID"] for r in b.get_bucket_lifecycle_configuration(Bucket=lc_bucket)["Rules"]][0] == "tmp"
    b.delete_bucket_lifecycle(Bucket=lc_bucket)
    with pytest.raises(ClientError) as err:
        a.get_bucket_lifecycle_configuration(Bucket=lc_bucket)
    assert _code(err.value) == "NoSuchLifecycleConfiguration"
    assert "Expiration" not in a.head_object(Bucket=lc_bucket, Key="tmp/x")


def test_a_lifecycle_pass_expires_versions_markers_and_stale_uploads(lc_gateways, pool, lc_bucket):
    a, b = (g.client() for g in lc_gateways)
    a.put_bucket_lifecycle_configuration(Bucket=lc_bucket, LifecycleConfiguration={"Rules": [
        {"ID": "tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 2}},
        {"ID": "old", "Status": "Enabled", "Filter": {"Prefix": "v/"}, "NoncurrentVersionExpiration": {"NoncurrentDays": 2}},
        {"ID": "dm", "Status": "Enabled", "Filter": {"Prefix": "dm/"}, "Expiration": {"ExpiredObjectDeleteMarker": True}},
        {"ID": "big", "Status": "Enabled", "Filter": {"And": {"Prefix": "sz/", "ObjectSizeGreaterThan": 1000}},
         "Expiration": {"Days": 2}},
        {"ID": "tag", "Status": "Enabled", "Filter": {"Tag": {"Key": "scratch", "Value": "yes"}}, "Expiration": {"Days": 2}},
        {"ID": "mpu", "Status": "Enabled", "Filter": {"Prefix": "up/"}, "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}}]})
    a.put_object(Bucket=lc_bucket, Key="tmp/a", Body=b"a")
    b.put_object(Bucket=lc_bucket, Key="keep/b", Body=b"b")
    old_c = a.put_object(Bucket=lc_bucket, Key="v/c", Body=b"c1")["VersionId"]
    b.put_object(Bucket=lc_bucket, Key="v/c", Body=b"c2")
    dm_v = a.put_object(Bucket=lc_bucket, Key="dm/x", Body=b"x")["VersionId"]
    b.delete_object(Bucket=lc_bucket, Key="dm/x")
    a.delete_object(Bucket=lc_bucket, Key="dm/x", VersionId=dm_v)   # the marker is left alone
    b.put_object(Bucket=lc_bucket, Key="sz/small", Body=b"s" * 10)
    a.put_object(Bucket=lc_bucket, Key="sz/large", Body=os.urandom(200_000))   # in data objects
    b.put_object(Bucket=lc_bucket, Key="t/yes", Body=b"y", Tagging="scratch=yes")
    a.put_object(Bucket=lc_bucket, Key="t/no", Body=b"n", Tagging="scratch=no")
    stale = a.create_multipart_upload(Bucket=lc_bucket, Key="up/big")["UploadId"]
    before = _pool_objects(pool)
    b.upload_part(Bucket=lc_bucket, Key="up/big", UploadId=stale, PartNumber=1, Body=b"p" * 100_000)
    part_data = _pool_objects(pool) - before
    other = a.create_multipart_upload(Bucket=lc_bucket, Key="elsewhere")["UploadId"]
    upload_oid = f"{_bucket_id(pool, lc_bucket)}.upload.{stale}"
    time.sleep(2.5)   # two lifecycle "days"
    fresh = b.create_multipart_upload(Bucket=lc_bucket, Key="up/fresh")["UploadId"]
    stats = _pass(lc_gateways[1])
    assert (stats["expired"], stats["versions_removed"], stats["uploads_aborted"]) == (3, 2, 1), stats
    assert stats["transitioned"] == 0 and "held" not in stats
    listing = a.list_object_versions(Bucket=lc_bucket)
    current = sorted(v["Key"] for v in listing["Versions"] if v["IsLatest"])
    assert current == ["keep/b", "sz/small", "t/no", "v/c"]
    assert sorted(m["Key"] for m in listing["DeleteMarkers"]) == ["sz/large", "t/yes", "tmp/a"]   # no dm/x
    assert old_c not in [v["VersionId"] for v in listing["Versions"]]
    assert len([v for v in listing["Versions"] if v["Key"] == "v/c"]) == 1
    assert a.get_object(Bucket=lc_bucket, Key="v/c")["Body"].read() == b"c2"
    # the current version expired under a marker: still there by its version id
    assert len([v for v in listing["Versions"] if v["Key"] == "sz/large"]) == 1
    uploads = {u["UploadId"] for u in b.list_multipart_uploads(Bucket=lc_bucket).get("Uploads", [])}
    assert uploads == {other, fresh}
    in_pool = _pool_objects(pool)
    assert part_data and upload_oid not in in_pool and not part_data & in_pool   # the part's data went
    with pytest.raises(ClientError) as err:
        a.list_parts(Bucket=lc_bucket, Key="up/big", UploadId=stale)
    assert _code(err.value) == "NoSuchUpload"
    # applied again: nothing more to do (no second marker on an expired key)
    again = _pass(lc_gateways[0])
    assert (again["expired"], again["versions_removed"], again["uploads_aborted"]) == (0, 0, 0), again
    for u in (other, fresh):
        a.abort_multipart_upload(Bucket=lc_bucket, Key="elsewhere" if u == other else "up/fresh", UploadId=u)


def test_a_locked_version_survives_lifecycle_expiration(lc_gateways):
    a, b = (g.client() for g in lc_gateways)
    name = f"lc-lock-{uuid.uuid4().hex[:10]}"
    a.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    try:
        kept = a.put_object(Bucket=name, Key="ckpt/a", Body=b"v1", ObjectLockMode="COMPLIANCE",
                            ObjectLockRetainUntilDate="2099-01-01T00:00:00Z")["VersionId"]
        held = b.put_object(Bucket=name, Key="ckpt/h", Body=b"h1", ObjectLockLegalHoldStatus="ON")["VersionId"]
        free = a.put_object(Bucket=name, Key="ckpt/b", Body=b"free-1")["VersionId"]
        for key in ("ckpt/a", "ckpt/h", "ckpt/b"):
            b.put_object(Bucket=name, Key=key, Body=b"v2")
        b.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": [
            {"ID": "old", "Status": "Enabled", "Filter": {"Prefix": "ckpt/"},
             "NoncurrentVersionExpiration": {"NoncurrentDays": 1}}]})
        time.sleep(1.5)
        stats = _pass(lc_gateways[0])
        assert stats["versions_removed"] == 1 and stats["held"] == 2, stats
        assert b.get_object(Bucket=name, Key="ckpt/a", VersionId=kept)["Body"].read() == b"v1"
        assert b.get_object(Bucket=name, Key="ckpt/h", VersionId=held)["Body"].read() == b"h1"
        with pytest.raises(ClientError) as err:
            b.head_object(Bucket=name, Key="ckpt/b", VersionId=free)
        assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    finally:
        a.delete_bucket_lifecycle(Bucket=name)


def test_two_gateways_running_the_pass_at_once_expire_each_object_once(lc_gateways, lc_bucket):
    a = lc_gateways[0].client()
    a.put_bucket_lifecycle_configuration(Bucket=lc_bucket, LifecycleConfiguration={"Rules": [
        {"ID": "all", "Status": "Enabled", "Filter": {"Prefix": "k/"}, "Expiration": {"Days": 1}}]})
    keys = [f"k/{i:03d}" for i in range(40)]
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda k: a.put_object(Bucket=lc_bucket, Key=k, Body=k.encode()), keys))
    time.sleep(1.5)
    start = threading.Barrier(2)

    def run(gw):
        start.wait()
        return _pass(gw)

    with ThreadPoolExecutor(2) as ex:
        both = list(ex.map(run, lc_gateways))
    assert sorted(s["expired"] for s in both) == [0, len(keys)], both   # one pass did it all
    listing = lc_gateways[1].client().list_object_versions(Bucket=lc_bucket, Prefix="k/")
    assert sorted(m["Key"] for m in listing["DeleteMarkers"]) == keys   # exactly one marker per key
    assert all(m["IsLatest"] for m in listing["DeleteMarkers"]) and len(listing["Versions"]) == len(keys)


def test_a_gateway_runs_lifecycle_passes_on_its_own_timer(pool, lc_gateways):
    """A gateway with a ``lifecycle_interval`` runs passes by itself (what cluster nodes do),
    under the same lock as the admin interface's passes."""
    timed = _gateway(pool, lifecycle_day_seconds=1, lifecycle_interval=1).start(timeout=60)
    s3 = lc_gateways[0].client()
    name = f"lc-timer-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    try:
        s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={"Rules": [
            {"ID": "all", "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 1}}]})
        s3.put_object(Bucket=name, Key="gone-soon", Body=b"x")
        deadline = time.monotonic() + 30
        while s3.list_objects_v2(Bucket=name).get("KeyCount") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert s3.list_objects_v2(Bucket=name)["KeyCount"] == 0
    finally:
        timed.stop()
        shutil.rmtree(timed.workdir, ignore_errors=True)
        s3.delete_bucket_lifecycle(Bucket=name)


def test_a_gateway_whose_watch_lapsed_reads_the_settings_again(gateways, pool, bucket):
    """A gateway whose watch pings stop (a client stalled or cut off from the OSD; here Ceph's
    own fault injection, ``objecter_inject_no_watch_ping``, in a bucket store of this process)
    has its watch dropped by the OSD once the lease ends and misses the next notify: it reads
    the settings instead of serving its cache, and once pinging again it registers the watch
    again and is notified."""
    from services.object.gateway import rados_buckets
    from services.object.gateway.rados_store import connect

    cluster, io = connect(pool)
    stalled = rados_buckets.RadosBucketStore(io, 4)
    try:
        assert stalled.get(bucket).versioning == ""
        cluster.conf_set("objecter_inject_no_watch_ping", "true")
        time.sleep(rados_buckets.WATCH_TIMEOUT + 2 * rados_buckets.PING_INTERVAL)
        other = gateways[0].client()
        other.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        assert stalled.get(bucket).versioning == "Enabled"
        cluster.conf_set("objecter_inject_no_watch_ping", "false")
        wait_for(lambda: stalled.get(bucket).watch.confirmed(), 60,
                 "the watch registered again and confirmed", interval=0.5)
        other.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
        assert stalled._by_name[bucket].stale    # notified (the change answered after that)
        assert stalled.get(bucket).versioning == "Suspended"
    finally:
        stalled.close()
        io.close()
        cluster.shutdown()


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
        killed = time.monotonic()
        # the dead gateway watched the bucket's settings and the registry: a change waits
        # for its watches' lease (rados_buckets.WATCH_TIMEOUT), not Ceph's default 30 s
        a, made = gateways[0].client(), f"m-{uuid.uuid4().hex[:10]}"
        a.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        versioning = time.monotonic() - killed
        a.create_bucket(Bucket=made)
        print(f"\nafter a gateway's kill -9: PutBucketVersioning {versioning:.1f} s, then "
              f"CreateBucket {time.monotonic() - killed - versioning:.1f} s")
        assert gateways[1].client().get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
        gateways[1].client().head_bucket(Bucket=made)
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


# -- server-side encryption: the local store's sse package on RADOS data objects ----------------


def _stored_bytes(store: dict, bucket_id: str) -> bytes:
    """Every byte the pool holds for a bucket: its objects' data and omap values (index
    shards with inline bodies, settings, uploads)."""
    import rados
    cluster = rados.Rados(conffile=store["ceph_conf"], name="client.admin", conf={"keyring": store["keyring"]})
    cluster.connect(timeout=30)
    out = []
    try:
        with cluster.open_ioctx(store["pool"]) as io:
            for name in [o.key for o in io.list_objects() if o.key.startswith(bucket_id)]:
                out.append(io.read(name, 64 * MIB))
                with rados.ReadOpCtx() as op:
                    it, _ = io.get_omap_vals(op, "", "", 100_000)
                    io.operate_read_op(op, name)
                    out += [v for _, v in it]
    finally:
        cluster.shutdown()
    return b"".join(out)


def _marked(size: int) -> tuple[bytes, bytes]:
    """A body of ``size`` bytes made of one recognisable 32-byte marker, and the marker."""
    marker = uuid.uuid4().hex.encode()
    return marker, (marker * (size // len(marker) + 1))[:size]


def _customer(key: str, copy: bool = False) -> dict:
    """SSE-C parameters of a 32-character key (boto3 adds its base64 and MD5)."""
    prefix = "CopySourceSSECustomer" if copy else "SSECustomer"
    return {prefix + "Algorithm": "AES256", prefix + "Key": key}


def _status(exc: ClientError) -> tuple[int, str]:
    return exc.response["ResponseMetadata"]["HTTPStatusCode"], _code(exc)


def test_sse_s3_and_kms_objects_written_on_one_gateway_read_on_the_other_and_no_plaintext_in_the_pool(
        gateways, pool, bucket):
    a, b = (g.client() for g in gateways)
    marker, big = _marked(5 * MIB + 12345)   # ciphertext over two data objects, packages across them
    small = marker * 100                     # inline in the index op
    put = a.put_object(Bucket=bucket, Key="s3-big", Body=big, ServerSideEncryption="AES256")
    assert put["ServerSideEncryption"] == "AES256" and put["ETag"] == f'"{hashlib.md5(big).hexdigest()}"'
    a.put_object(Bucket=bucket, Key="s3-small", Body=small, ServerSideEncryption="AES256")
    kms = a.put_object(Bucket=bucket, Key="kms", Body=big[:300_000], ServerSideEncryption="aws:kms",
                       SSEKMSKeyId="alias/ckpt")
    assert kms["SSEKMSKeyId"].endswith(f"key/{KMS_KEY}")
    a.put_object(Bucket=bucket, Key="kms-default", Body=small, ServerSideEncryption="aws:kms")   # aws/s3
    got = b.get_object(Bucket=bucket, Key="s3-big")
    assert (got["ServerSideEncryption"], got["ContentLength"]) == ("AES256", len(big))
    assert hashlib.sha256(got["Body"].read()).digest() == hashlib.sha256(big).digest()
    assert b.get_object(Bucket=bucket, Key="s3-small")["Body"].read() == small
    got = b.get_object(Bucket=bucket, Key="kms")
    assert got["Body"].read() == big[:300_000] and got["SSEKMSKeyId"] == kms["SSEKMSKeyId"]
    assert b.get_object(Bucket=bucket, Key="kms-default")["Body"].read() == small
    assert b.head_object(Bucket=bucket, Key="kms")["ServerSideEncryption"] == "aws:kms"
    # ranges: inside one package, across packages, across the 4 MiB data object boundary, the tail
    for first, last in ((5, 9), (65_530, 65_545), (4 * MIB - 100, 4 * MIB + 70_000), (len(big) - 7, len(big) - 1)):
        ranged = b.get_object(Bucket=bucket, Key="s3-big", Range=f"bytes={first}-{last}")
        assert ranged["Body"].read() == big[first:last + 1]
        assert ranged["ContentRange"] == f"bytes {first}-{last}/{len(big)}"
    assert b.get_object(Bucket=bucket, Key="s3-small", Range="bytes=10-20")["Body"].read() == small[10:21]
    with pytest.raises(ClientError) as err:
        a.put_object(Bucket=bucket, Key="x", Body=b"x", ServerSideEncryption="aws:kms", SSEKMSKeyId="alias/none")
    assert _status(err.value) == (400, "KMS.NotFoundException")
    assert marker not in _stored_bytes(pool, _bucket_id(pool, bucket))


def test_sse_c_needs_its_key_on_every_gateway_and_copies_change_encryption_mode(gateways, pool, bucket):
    a, b = (g.client() for g in gateways)
    key, other = uuid.uuid4().hex, uuid.uuid4().hex
    marker, body = _marked(300_000)
    put = a.put_object(Bucket=bucket, Key="c", Body=body, **_customer(key))
    assert put["SSECustomerAlgorithm"] == "AES256" and "ServerSideEncryption" not in put
    assert put["ETag"] != f'"{hashlib.md5(body).hexdigest()}"'   # an SSE-C ETag is no MD5 of the data
    got = b.get_object(Bucket=bucket, Key="c", **_customer(key))
    assert got["Body"].read() == body
    assert b.get_object(Bucket=bucket, Key="c", Range="bytes=70000-70009", **_customer(key))["Body"].read() \
        == body[70000:70010]
    # as S3: no key 400 InvalidRequest, another key 403 AccessDenied (HEAD: the status alone)
    with pytest.raises(ClientError) as err:
        b.get_object(Bucket=bucket, Key="c")
    assert _status(err.value) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as err:
        b.get_object(Bucket=bucket, Key="c", **_customer(other))
    assert _status(err.value) == (403, "AccessDenied")
    with pytest.raises(ClientError) as err:
        b.head_object(Bucket=bucket, Key="c", **_customer(other))
    assert _status(err.value)[0] == 403
    with pytest.raises(ClientError) as err:   # a copy of it needs its key too
        b.copy_object(Bucket=bucket, Key="c2", CopySource={"Bucket": bucket, "Key": "c"})
    assert _status(err.value)[0] == 400
    # CopyObject between modes, each copy made on one gateway and read on the other
    b.copy_object(Bucket=bucket, Key="c-to-s3", CopySource={"Bucket": bucket, "Key": "c"},
                  ServerSideEncryption="AES256", **_customer(key, copy=True))
    got = a.get_object(Bucket=bucket, Key="c-to-s3")
    assert (got["ServerSideEncryption"], got["Body"].read()) == ("AES256", body)
    a.put_object(Bucket=bucket, Key="plain", Body=body)
    b.copy_object(Bucket=bucket, Key="plain-to-kms", CopySource={"Bucket": bucket, "Key": "plain"},
                  ServerSideEncryption="aws:kms", SSEKMSKeyId=KMS_KEY)
    got = a.get_object(Bucket=bucket, Key="plain-to-kms")
    assert (got["ServerSideEncryption"], got["Body"].read()) == ("aws:kms", body)
    b.copy_object(Bucket=bucket, Key="kms-to-c", CopySource={"Bucket": bucket, "Key": "plain-to-kms"},
                  **_customer(other))
    assert a.get_object(Bucket=bucket, Key="kms-to-c", **_customer(other))["Body"].read() == body
    b.copy_object(Bucket=bucket, Key="s3-to-plain", CopySource={"Bucket": bucket, "Key": "c-to-s3"})
    got = a.get_object(Bucket=bucket, Key="s3-to-plain")
    assert "ServerSideEncryption" not in got and got["Body"].read() == body
    b.delete_object(Bucket=bucket, Key="plain")
    b.delete_object(Bucket=bucket, Key="s3-to-plain")
    assert marker not in _stored_bytes(pool, _bucket_id(pool, bucket))


def test_bucket_default_encryption_set_on_one_gateway_holds_on_the_other_at_once(gateways, bucket):
    a, b = (g.client() for g in gateways)
    a.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": KMS_KEY}}]})
    rule = b.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": KMS_KEY}
    put = b.put_object(Bucket=bucket, Key="d", Body=b"defaulted")
    assert put["ServerSideEncryption"] == "aws:kms" and put["SSEKMSKeyId"].endswith(f"key/{KMS_KEY}")
    got = a.get_object(Bucket=bucket, Key="d")
    assert (got["ServerSideEncryption"], got["Body"].read()) == ("aws:kms", b"defaulted")
    up = b.create_multipart_upload(Bucket=bucket, Key="d-mp")   # uploads take the default too
    assert up["ServerSideEncryption"] == "aws:kms"
    b.abort_multipart_upload(Bucket=bucket, Key="d-mp", UploadId=up["UploadId"])
    b.delete_bucket_encryption(Bucket=bucket)
    with pytest.raises(ClientError) as err:
        a.get_bucket_encryption(Bucket=bucket)
    assert _status(err.value) == (404, "ServerSideEncryptionConfigurationNotFoundError")
    assert "ServerSideEncryption" not in a.put_object(Bucket=bucket, Key="p", Body=b"plain")
    assert b.get_object(Bucket=bucket, Key="d")["Body"].read() == b"defaulted"   # existing ones stay
    with pytest.raises(ClientError) as err:
        a.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "nope"}}]})
    assert _status(err.value) == (400, "KMS.NotFoundException")


def test_multipart_with_sse_parts_on_both_gateways_and_a_part_copied_from_an_sse_c_object(gateways, pool, bucket):
    a, b = (g.client() for g in gateways)
    key = uuid.uuid4().hex
    marker, source = _marked(6 * MIB)
    a.put_object(Bucket=bucket, Key="src", Body=source, **_customer(key))
    up = a.create_multipart_upload(Bucket=bucket, Key="mp", ServerSideEncryption="AES256")
    assert up["ServerSideEncryption"] == "AES256"
    uid = up["UploadId"]
    p1 = os.urandom(5 * MIB + 3)
    e1 = b.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=1, Body=p1)
    assert e1["ServerSideEncryption"] == "AES256"
    e2 = a.upload_part_copy(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=2,
                            CopySource={"Bucket": bucket, "Key": "src"}, CopySourceRange=f"bytes=0-{5 * MIB}",
                            **_customer(key, copy=True))
    p3 = os.urandom(100_001)
    e3 = b.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=3, Body=p3)
    whole = p1 + source[:5 * MIB + 1] + p3
    done = a.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": e1["ETag"]}, {"PartNumber": 2, "ETag": e2["CopyPartResult"]["ETag"]},
        {"PartNumber": 3, "ETag": e3["ETag"]}]})
    assert done["ServerSideEncryption"] == "AES256"
    got = b.get_object(Bucket=bucket, Key="mp")
    assert got["ContentLength"] == len(whole)
    assert hashlib.sha256(got["Body"].read()).digest() == hashlib.sha256(whole).digest()
    edge = len(p1)   # a range across the first part's end
    assert b.get_object(Bucket=bucket, Key="mp", Range=f"bytes={edge - 50}-{edge + 49}")["Body"].read() \
        == whole[edge - 50:edge + 50]
    assert b.get_object(Bucket=bucket, Key="mp", PartNumber=3)["Body"].read() == p3
    # an SSE-C upload needs the customer key on every part, whichever gateway takes it
    cu = b.create_multipart_upload(Bucket=bucket, Key="mpc", **_customer(key))["UploadId"]
    with pytest.raises(ClientError) as err:
        a.upload_part(Bucket=bucket, Key="mpc", UploadId=cu, PartNumber=1, Body=b"x" * 1000)
    assert _status(err.value)[0] == 400
    c1 = a.upload_part(Bucket=bucket, Key="mpc", UploadId=cu, PartNumber=1, Body=p3, **_customer(key))
    a.complete_multipart_upload(Bucket=bucket, Key="mpc", UploadId=cu,
                                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": c1["ETag"]}]})
    assert b.get_object(Bucket=bucket, Key="mpc", **_customer(key))["Body"].read() == p3
    assert marker not in _stored_bytes(pool, _bucket_id(pool, bucket))


def test_a_flipped_bit_in_a_data_object_fails_the_read_of_its_package_only(gateways, pool, bucket):
    import rados
    a, b = (g.client() for g in gateways)
    _, body = _marked(2 * MIB)
    a.put_object(Bucket=bucket, Key="victim", Body=body, ServerSideEncryption="AES256")
    prefix = _bucket_id(pool, bucket) + ".d."
    [name] = [o for o in _pool_objects(pool) if o.startswith(prefix)]
    cluster = rados.Rados(conffile=pool["ceph_conf"], name="client.admin", conf={"keyring": pool["keyring"]})
    cluster.connect(timeout=30)
    try:
        with cluster.open_ioctx(pool["pool"]) as io:   # one bit of the second package
            io.write(name, bytes([io.read(name, 1, 70000)[0] ^ 1]), 70000)
    finally:
        cluster.shutdown()
    assert b.get_object(Bucket=bucket, Key="victim", Range="bytes=0-1000")["Body"].read() == body[:1001]
    with pytest.raises(ClientError) as err:   # (the package is read before any header is sent)
        b.get_object(Bucket=bucket, Key="victim", Range="bytes=65536-70000")
    assert _status(err.value) == (500, "InternalError")
