"""Many writers at once, and kill -9 in the middle of them."""
from __future__ import annotations

import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from services.object.tests.gatewayproc import GatewayProcess
from tests.kit import wait_for


def _payload(key: str, size: int, generation: str = "new") -> bytes:
    seed = hashlib.sha256(f"{generation}:{key}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def test_200_concurrent_puts_all_listed(gateway, s3, bucket):
    keys = [f"rank-{i:03d}/shard.pt" for i in range(200)]

    def put(key):
        s3.put_object(Bucket=bucket, Key=key, Body=_payload(key, 4096 + len(key)))
        return key

    with ThreadPoolExecutor(max_workers=64) as pool:
        done = list(pool.map(put, keys))
    assert sorted(done) == keys
    listed, token = [], None
    while True:
        page = s3.list_objects_v2(Bucket=bucket, **({"ContinuationToken": token} if token else {}))
        listed += [o["Key"] for o in page["Contents"]]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert listed == keys
    for key in keys[::37]:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == _payload(key, 4096 + len(key))


def test_kill9_during_concurrent_puts(fresh_gateway):
    gw = fresh_gateway
    s3 = gw.client(connect_timeout=5, read_timeout=30)
    s3.create_bucket(Bucket="crash")
    # sizes straddle the segment / own-file threshold; 20 keys already exist and get overwritten
    sizes = {f"obj-{i:03d}": (1000 + i * 37 if i % 2 else 1_000_000 + i * 4099) for i in range(100)}
    for key in list(sizes)[:20]:
        s3.put_object(Bucket="crash", Key=key, Body=_payload(key, sizes[key], "old"))
    acked: list[str] = []
    lock = threading.Lock()
    # a client of its own, so that no connection of the killed process is reused later
    raw = gw.client(max_pool_connections=100, connect_timeout=5, read_timeout=30)

    def put(key):
        try:
            raw.put_object(Bucket="crash", Key=key, Body=_payload(key, sizes[key]))
        except Exception:  # noqa: BLE001 - the gateway was killed under this request
            return
        with lock:
            acked.append(key)

    pool = ThreadPoolExecutor(max_workers=100)
    futures = [pool.submit(put, key) for key in sizes]
    wait_for(lambda: len(acked) >= 15, 30, "15 acknowledged PUTs", interval=0.005)
    gw.kill9()
    for f in futures:
        f.result()
    pool.shutdown()
    assert 0 < len(acked) < 100, f"the kill should land while PUTs are in flight ({len(acked)} acked)"
    gw.start()
    s3 = gw.client()
    listed = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket="crash")["Contents"]}
    for key in acked:
        assert key in listed
        assert s3.get_object(Bucket="crash", Key=key)["Body"].read() == _payload(key, sizes[key])
    for key, size in listed.items():
        body = s3.get_object(Bucket="crash", Key=key)["Body"].read()
        assert body in (_payload(key, sizes[key]), _payload(key, sizes[key], "old")), f"{key} is partial"
        assert len(body) == size
    # the pre-existing keys are all still there, old or new
    assert set(list(sizes)[:20]) <= set(listed)
    # and the restarted gateway takes new writes
    s3.put_object(Bucket="crash", Key="after", Body=b"ok")
    assert s3.get_object(Bucket="crash", Key="after")["Body"].read() == b"ok"
    # large bodies are written in place: the files the kill cut short, or left unreferenced,
    # are removed by the orphan collector a few seconds after the restart; the others stay
    data_dir = os.path.join(gw.data_root, "buckets", "crash", "data")

    def files() -> list[str]:
        return [os.path.join(d, f) for d, _, names in os.walk(data_dir) for f in names]

    want = sum(1 for size in listed.values() if size >= 128 * 1024)
    wait_for(lambda: len(files()), 30, f"one file for each of the {want} large objects",
             interval=0.2, until=lambda n: n == want)
    for key in acked:
        assert s3.get_object(Bucket="crash", Key=key)["Body"].read() == _payload(key, sizes[key])


def test_small_puts_and_copies_across_segment_ends_survive_kill9():
    """Small bodies are appended by the group commit, a batch at a time, while copies append
    theirs from the event loop: with small segments, batches and copies cross segment ends
    all the time. Every acknowledged object reads back whole, before and after a kill -9."""
    with GatewayProcess.running(segment_bytes=64 * 1024, compaction_interval=3600) as gw:
        s3 = gw.client()
        s3.create_bucket(Bucket="segs")
        sizes = {f"o/{i:03d}": 1 + (i * 997) % 9000 for i in range(240)}
        sizes["o/empty"] = 0

        def put(key):
            s3.put_object(Bucket="segs", Key=key, Body=_payload(key, sizes[key]))
            if key.endswith("7"):  # a copy of it, appended from the event loop
                s3.copy_object(Bucket="segs", Key=key + ".copy", CopySource={"Bucket": "segs", "Key": key})

        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(put, sizes))
        want = {**sizes, **{k + ".copy": n for k, n in sizes.items() if k.endswith("7")}}

        def check():
            client = gw.client()
            listed = {o["Key"]: o["Size"] for page in client.get_paginator("list_objects_v2").paginate(Bucket="segs")
                      for o in page.get("Contents", [])}
            assert listed == want
            for key, size in want.items():
                got = client.get_object(Bucket="segs", Key=key)["Body"].read()
                assert got == _payload(key.removesuffix(".copy"), size), key

        check()
        assert len(os.listdir(os.path.join(gw.data_root, "segments"))) > 10
        gw.kill9()
        gw.start()
        check()
