#!/usr/bin/env python3
"""Bucket snapshots and bucket replication, on two Strata S3 gateway subprocesses:

1. snapshot cut: the time to record a snapshot of a bucket of ``--objects`` small objects
   (admin ``POST .../snapshots``), and the median / worst latency of a PUT made while
   snapshots are taken back to back (a snapshot blocks no PUT, only version deletes);
2. restore: a snapshot copied into a new bucket by the gateway (admin restore pages), as
   MiB/s and objects/s, against reading the same objects with GET;
3. replication data path: the change feed read from the first gateway, each version read
   with GetObject(VersionId) and written to the second gateway (PutObject, multipart above
   64 MiB), ``--parallel`` keys at once, as the plane's run does (without its watermark
   updates and I/O budget), as MiB/s and objects/s against the GET read alone.

Data is incompressible. Everything lives in a ``/tmp/strata-test-bench-*`` directory
removed at the end.

    .venv/bin/python bench/bucket_protection.py [--objects 2000] [--small-kib 64] \
        [--large 16] [--large-mib 16] [--parallel 4] [--json]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.object.admin_client import GatewayAdminClient  # noqa: E402
from services.object.tests.gatewayproc import ADMIN_TOKEN, GatewayProcess  # noqa: E402

MiB = 1 << 20


def fill(s3, bucket: str, objects: int, small: int, large: int, large_size: int) -> int:
    """Write the data set with 8 threads; return its bytes."""
    from concurrent.futures import ThreadPoolExecutor
    jobs = [(f"small/{i:06d}", small) for i in range(objects)]
    jobs += [(f"large/{i:03d}", large_size) for i in range(large)]

    def put(job):
        key, size = job
        s3.put_object(Bucket=bucket, Key=key, Body=os.urandom(size))
        return size

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(put, jobs))


def read_all(s3, bucket: str) -> tuple[float, int]:
    """(seconds, bytes) to GET every current object once, one at a time."""
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]
    start, total = time.perf_counter(), 0
    for key in keys:
        total += len(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    return time.perf_counter() - start, total


def snapshot_latency(s3, admin, bucket: str, rounds: int) -> dict:
    """Snapshot times, and PUT latencies while snapshots are taken back to back."""
    stop, lat = threading.Event(), []

    def writer():
        body, i = os.urandom(4096), 0
        while not stop.is_set():
            t = time.perf_counter()
            s3.put_object(Bucket=bucket, Key=f"live/{i % 100}", Body=body)
            lat.append(time.perf_counter() - t)
            i += 1

    times = []
    t = threading.Thread(target=writer)
    t.start()
    try:
        for n in range(rounds):
            start = time.perf_counter()
            admin.create_snapshot(bucket, f"bench-{n}")
            times.append(time.perf_counter() - start)
    finally:
        stop.set()
        t.join()
    alone = []
    for i in range(200):
        start = time.perf_counter()
        s3.put_object(Bucket=bucket, Key=f"live/{i % 100}", Body=b"x" * 4096)
        alone.append(time.perf_counter() - start)
    return {"snapshot_s_median": statistics.median(times), "snapshot_s_max": max(times),
            "put_ms_median_during": 1000 * statistics.median(lat),
            "put_ms_max_during": 1000 * max(lat),
            "put_ms_median_alone": 1000 * statistics.median(alone)}


def restore(admin, bucket: str, snap: str, target: str) -> float:
    admin.create_bucket(target, owner="admin", versioning="Enabled")
    start, after = time.perf_counter(), ""
    while True:
        page = admin.restore_snapshot_page(bucket, snap, target, after=after)
        if page["done"]:
            return time.perf_counter() - start
        after = page["next"]


class ChunkReader:
    """``read(n)`` over an iterator of chunks (as the plane's run feeds upload_fileobj)."""

    def __init__(self, chunks):
        self.chunks, self.buf = iter(chunks), b""

    def read(self, n=-1) -> bytes:
        while n < 0 or len(self.buf) < n:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buf += chunk
        n = len(self.buf) if n < 0 else n
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def replicate(src, dst, admin, bucket: str, target: str, parallel: int) -> tuple:
    """The plane's copy loop without Django (a page of the change feed at a time, ``parallel``
    keys at once): (seconds, versions, bytes)."""
    from concurrent.futures import ThreadPoolExecutor

    from boto3.s3.transfer import TransferConfig
    cfg = TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=16 * MiB,
                         use_threads=False)

    def apply(changes) -> tuple:
        n = total = 0
        for ch in changes:
            if ch["marker"]:
                dst.delete_object(Bucket=target, Key=ch["key"])
                continue
            obj = src.get_object(Bucket=bucket, Key=ch["key"], VersionId=ch["version_id"])
            extra = {"ContentType": obj["ContentType"], "Metadata": obj.get("Metadata") or {}}
            if ch["size"] < cfg.multipart_threshold:
                dst.put_object(Bucket=target, Key=ch["key"], Body=b"".join(
                    obj["Body"].iter_chunks(MiB)), **extra)
            else:
                dst.upload_fileobj(ChunkReader(obj["Body"].iter_chunks(MiB)), target, ch["key"],
                                   ExtraArgs=extra, Config=cfg)
            n, total = n + 1, total + ch["size"]
        return n, total

    start, after, n, total = time.perf_counter(), 0, 0, 0
    with ThreadPoolExecutor(parallel) as pool:
        while True:
            feed = admin.changes(bucket, after, limit=500)
            groups: dict = {}
            for ch in feed["changes"]:
                groups.setdefault(ch["key"], []).append(ch)
            for done, size in pool.map(apply, groups.values()):
                n, total = n + done, total + size
            after = feed["horizon"]
            if not feed["truncated"]:
                return time.perf_counter() - start, n, total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--objects", type=int, default=2000)
    p.add_argument("--small-kib", type=int, default=64)
    p.add_argument("--large", type=int, default=16)
    p.add_argument("--large-mib", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--parallel", type=int, default=4, help="keys copied at once (as PARALLEL)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="strata-test-bench-"))
    gws = [GatewayProcess(str(workdir / name)) for name in ("a", "b")
           if (workdir / name).mkdir() or True]
    try:
        for gw in gws:
            gw.start()
        src, dst = gws[0].client(), gws[1].client()
        admin = GatewayAdminClient(gws[0].endpoint, ADMIN_TOKEN, timeout=600)
        src.create_bucket(Bucket="data")
        admin.set_versioning("data", "Enabled")
        dst.create_bucket(Bucket="replica")
        size = fill(src, "data", args.objects, args.small_kib << 10, args.large,
                    args.large_mib * MiB)
        count = args.objects + args.large
        out = {"objects": count, "bytes": size}
        out.update(snapshot_latency(src, admin, "data", args.rounds))
        read_s, read_bytes = read_all(src, "data")
        out["get_mib_s"] = read_bytes / MiB / read_s
        out["get_objects_s"] = (count + 100) / read_s
        admin.create_snapshot("data", "base")
        secs = restore(admin, "data", "base", "restored")
        out["restore_mib_s"] = (read_bytes - 100 * 4096) / MiB / secs
        out["restore_objects_s"] = (count + 100) / secs
        secs, n, total = replicate(src, dst, admin, "data", "replica", args.parallel)
        out["replicate_mib_s"] = total / MiB / secs
        out["replicate_versions_s"] = n / secs
        out["restore_vs_get"] = out["restore_mib_s"] / out["get_mib_s"]
        out["replicate_vs_get"] = out["replicate_mib_s"] / out["get_mib_s"]
    finally:
        for gw in gws:
            gw.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"data set: {out['objects']} objects, {out['bytes'] / MiB:.0f} MiB "
          f"({args.objects} x {args.small_kib} KiB, {args.large} x {args.large_mib} MiB)")
    print(f"snapshot cut: median {out['snapshot_s_median'] * 1000:.0f} ms, worst "
          f"{out['snapshot_s_max'] * 1000:.0f} ms; 4 KiB PUT during snapshots median "
          f"{out['put_ms_median_during']:.1f} ms (worst {out['put_ms_max_during']:.1f}), alone "
          f"{out['put_ms_median_alone']:.1f} ms")
    print(f"GET read:     {out['get_mib_s']:.0f} MiB/s, {out['get_objects_s']:.0f} objects/s")
    print(f"restore:      {out['restore_mib_s']:.0f} MiB/s, {out['restore_objects_s']:.0f} "
          f"objects/s ({out['restore_vs_get']:.2f}x GET)")
    print(f"replication:  {out['replicate_mib_s']:.0f} MiB/s, {out['replicate_versions_s']:.0f} "
          f"versions/s ({out['replicate_vs_get']:.2f}x GET)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
