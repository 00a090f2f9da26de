#!/usr/bin/env python3
"""What S3 buckets kept by Strata itself in RADOS would cost (data in RADOS objects, the index
in omap, as radosgw lays it out), measured against radosgw doing the same S3 requests on the
same cluster: the figures behind "Buckets on Ceph pools: the design" in services/object/README.md.

Option (a), the primitives Strata's gateway would issue through librados (python3-rados):

- ``If-None-Match: *``: one write op on the bucket's index object, ``omap_cmp(key, "", EQ)``
  (an absent key reads as the empty value) + ``set_omap``; two clients with their own cluster
  connections race for the same key ``--races`` times and exactly one must win each round;
- ``If-Match``: the entry is read, then written back with ``omap_cmp(key, old entry, EQ)``:
  a stale writer (an entry changed since it read) gets ECANCELED;
- a 4 KiB and a 1 MiB PUT: the data object's ``write_full`` and the index commit (two ops,
  in that order, so an entry never names missing data), and for 4 KiB also the data inline
  in the index entry (one op);
- listing 1000 keys in order: ``get_omap_vals`` in one read op;
- a bucket setting changed on all nodes at once: the settings object written, then a
  ``notify`` that returns once every watching gateway (here the second client) has acknowledged.

Option (b), the same through radosgw (boto3): PUT 4 KiB / 1 MiB, PUT with ``If-None-Match: *``
(the same race of two clients), GET 4 KiB, LIST 1000 keys; and for reference the same requests
to Strata's gateway on a local bucket (one worker), whose CPU per request is what (a) keeps of
HTTP, auth and S3 on top of its librados calls.

Each row prints the median latency, the client's CPU per op (this process, librados' threads
included: for (a) that is what the gateway would add in librados, before its HTTP and auth
work), the OSDs' CPU per op, and the S3 server's CPU per request, all from /proc (they do not depend
on how busy the shared cores were; latencies do). The cluster is the development cluster
(``dataplane.ceph.devcluster``: mon, mgr, 3 OSDs each its own CRUSH host) started in
``/tmp/strata-test-*`` and removed at the end, or an existing one with ``--ceph-conf`` (pools
created and deleted; radosgw needs the dev cluster). Pools are replicated, ``--size`` copies.

    .venv/bin/python bench/s3_rados_index.py [--ops 200] [--big-ops 30] [--races 50] [--size 3]
"""
from __future__ import annotations

import argparse
import errno
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

from bench.s3_servers import ACCESS, SECRET, ceph_unavailable, process_tree_cpu, start_strata  # noqa: E402
from plumbing.process import free_port  # noqa: E402

KiB, MiB = 1024, 1 << 20
POOL = "strata-bench-idx"
INDEX = "bucket.index.0"       # one index shard (radosgw: .dir.<marker>.<shard>)
SETTINGS = "bucket.settings"   # policy, ACL, lock, versioning of the bucket


class Meter:
    """Latency of each op and the CPU seconds of this process, the OSDs and the S3 server
    (radosgw or Strata's gateway) over a run of ops."""

    def __init__(self, osd_pids, server_pids):
        self.osd_pids, self.server_pids = osd_pids, server_pids

    def run(self, name, ops: int, op) -> dict:
        lat = []
        cpu0 = (time.process_time(), process_tree_cpu(self.osd_pids()), process_tree_cpu(self.server_pids()))
        for i in range(ops):
            t = time.perf_counter()
            op(i)
            lat.append(time.perf_counter() - t)
        cpu1 = (time.process_time(), process_tree_cpu(self.osd_pids()), process_tree_cpu(self.server_pids()))
        client, osd, server = ((b - a) / ops * 1000 for a, b in zip(cpu0, cpu1))
        row = {"name": name, "ops": ops, "median_ms": statistics.median(lat) * 1000,
               "client_cpu_ms": client, "osd_cpu_ms": osd, "server_cpu_ms": server}
        print(f"{name:<44}{row['median_ms']:>9.2f}{client:>11.2f}"
              f"{(f'{osd:.2f}' if self.osd_pids() else '-'):>10}"
              f"{(f'{server:.2f}' if self.server_pids() else '-'):>11}", flush=True)
        return row


def header(title: str) -> None:
    print(f"\n{title}\n{'op':<44}{'median ms':>9}{'client CPU':>11}{'OSD CPU':>10}{'server CPU':>11}"
          f"\n{'':<44}{'':>9}{'ms/op':>11}{'ms/op':>10}{'ms/req':>11}")


# -- (a) Strata's layout in RADOS ----------------------------------------------------------

def entry(etag: str, size: int, data: str = "") -> str:
    """An index entry: what the gateway's SQLite row holds today (JSON, never empty)."""
    return json.dumps({"etag": etag, "size": size, "mtime": time.time(), "data": data})


def put_if(rados, ioctx, key: str, expect: str, value: str) -> bool:
    """One op on the index object: the entry must be ``expect`` ("": absent, as an absent key
    reads as the empty value: If-None-Match: *; else the entry whose etag the request's
    If-Match named), then it is set to ``value``; False when the comparison failed."""
    with rados.WriteOpCtx() as op:
        op.omap_cmp(key, expect, rados.LIBRADOS_CMPXATTR_OP_EQ)
        ioctx.set_omap(op, (key,), (value.encode(),))
        try:
            ioctx.operate_write_op(op, INDEX)
            return True
        except rados.Error as exc:
            if getattr(exc, "errno", None) == errno.ECANCELED:
                return False
            raise


def read_entry(rados, ioctx, key: str) -> str:
    """The index entry of ``key`` ("" when absent), one read op."""
    with rados.ReadOpCtx() as op:
        it, _ = ioctx.get_omap_vals_by_keys(op, (key,))
        ioctx.operate_read_op(op, INDEX)
        return {k: v.decode() for k, v in it}.get(key, "")


def race(label: str, contenders, rounds: int) -> dict:
    """``rounds`` times, every contender tries the same fresh key at once (a barrier): count
    the rounds with exactly one winner."""
    exact, wins = 0, [0] * len(contenders)
    for r in range(rounds):
        barrier = threading.Barrier(len(contenders))
        got = [None] * len(contenders)

        def go(i, attempt):
            barrier.wait()
            got[i] = attempt(f"race-{r}")

        threads = [threading.Thread(target=go, args=(i, c)) for i, c in enumerate(contenders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        exact += got.count(True) == 1
        for i, g in enumerate(got):
            wins[i] += bool(g)
    print(f"{label}: {exact}/{rounds} rounds had exactly one winner (wins per client: {wins})",
          flush=True)
    return {"race": label, "rounds": rounds, "exactly_one": exact, "wins": wins}


def bench_rados(args, rados, conf, client, meter) -> list:
    clients = []
    for _ in range(2):      # two gateways on two nodes: two cluster connections
        c = rados.Rados(conffile=conf, name=f"client.{client}")
        c.connect()
        clients.append(c)
    main = clients[0]
    main.create_pool(POOL)
    main.mon_command(json.dumps({"prefix": "osd pool set", "pool": POOL, "var": "size",
                                 "val": str(args.size), "yes_i_really_mean_it": True}), b"")
    main.mon_command(json.dumps({"prefix": "osd pool application enable", "pool": POOL,
                                 "app": "rgw"}), b"")
    ioctxs = [c.open_ioctx(POOL) for c in clients]
    io = ioctxs[0]
    try:
        with rados.WriteOpCtx() as op:   # the index object exists before any omap_cmp
            op.new(rados.LIBRADOS_CREATE_IDEMPOTENT)
            io.operate_write_op(op, INDEX)
        results = [race("(a) If-None-Match:* through omap_cmp, 2 clients", [
            lambda key, i=i: put_if(rados, ioctxs[i], key, "", entry(f"etag-{i}", 1))
            for i in range(2)], args.races)]
        # a stale If-Match loses: client 0 reads, client 1 changes the entry, client 0 writes
        put_if(rados, io, "stale", "", entry("e1", 1))
        seen = read_entry(rados, io, "stale")
        assert put_if(rados, ioctxs[1], "stale", seen, entry("e2", 2))
        stale_ok = put_if(rados, io, "stale", seen, entry("e3", 3))
        print(f"(a) If-Match with a stale entry: {'applied (WRONG)' if stale_ok else 'refused (ECANCELED)'}"
              f"; entry now {json.loads(read_entry(rados, io, 'stale'))['etag']}", flush=True)
        results.append({"stale_if_match_refused": not stale_ok})

        header("(a) Strata's layout in RADOS (librados from this process)")
        small, big = os.urandom(4 * KiB), os.urandom(MiB)
        results.append(meter.run("index put If-None-Match:* (1 op)", args.ops, lambda i: put_if(
            rados, io, f"inm-{i:06d}", "", entry("e", 1))))
        results.append(meter.run("index If-Match: read + cmp-write (2 ops)", args.ops, lambda i: put_if(
            rados, io, f"inm-{i:06d}", read_entry(rados, io, f"inm-{i:06d}"), entry("e2", 2))))

        def put(data, i, prefix):
            io.write_full(f"data.{prefix}-{i:06d}", data)
            assert put_if(rados, io, f"{prefix}-{i:06d}", "", entry("e", len(data)))

        results.append(meter.run("PUT 4 KiB: data + index (2 ops)", args.ops, lambda i: put(small, i, "s")))
        inline = small.hex()    # a JSON value is text: the 4 KiB as hex, 8 KiB of omap
        results.append(meter.run("PUT 4 KiB inline in the entry (1 op)", args.ops, lambda i: put_if(
            rados, io, f"i-{i:06d}", "", entry("e", 4 * KiB, inline))))
        results.append(meter.run("PUT 1 MiB: data + index (2 ops)", args.big_ops, lambda i: put(big, i, "b")))
        results.append(meter.run("GET 4 KiB: entry + data (2 ops)", args.ops, lambda i: (
            read_entry(rados, io, f"s-{i:06d}"), io.read(f"data.s-{i:06d}", 4 * KiB))))

        with rados.WriteOpCtx() as op:     # 1000 keys of one "directory" for the listing
            io.set_omap(op, tuple(f"list/{i:06d}" for i in range(1000)),
                        tuple(entry("e", 1).encode() for _ in range(1000)))
            io.operate_write_op(op, INDEX)

        def listing(_):
            with rados.ReadOpCtx() as op:
                it, _ = io.get_omap_vals(op, "", "list/", 1000)
                io.operate_read_op(op, INDEX)
                keys = [k for k, _ in it]
            assert len(keys) == 1000 and keys == sorted(keys), (len(keys), keys[:3])

        results.append(meter.run("LIST 1000 keys in order (1 op)", max(5, args.ops // 10), listing))

        # a bucket setting changed on one node holds on the others once notify returns: the
        # other client watches the bucket's settings object and drops its cache on a notify,
        # and notify returns only when every watcher has acknowledged
        io.write_full(SETTINGS, b"{}")
        seen = []
        watch = ioctxs[1].watch(SETTINGS, lambda *a: seen.append(a))
        try:
            results.append(meter.run("settings write + notify, 1 watcher acked", max(5, args.ops // 4),
                                     lambda i: (io.write_full(SETTINGS, json.dumps({"v": i}).encode()),
                                                io.notify(SETTINGS, str(i), 10000))))
        finally:
            watch.close()
        print(f"(a) the watcher saw {len(seen)} notifies of {max(5, args.ops // 4)}", flush=True)
        return results
    finally:
        for i in ioctxs:
            i.close()
        try:
            main.delete_pool(POOL)
        finally:
            for c in clients:
                c.shutdown()


# -- (b) radosgw, and Strata's gateway on a local bucket for reference ---------------------

def bench_s3(args, label: str, endpoint: str, meter) -> list:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    def s3():
        return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS,
                            aws_secret_access_key=SECRET, region_name="us-east-1",
                            config=Config(retries={"max_attempts": 1}))

    clients = [s3(), s3()]
    c = clients[0]
    c.create_bucket(Bucket="bench")

    def put_if_absent(cl, key):
        try:
            cl.put_object(Bucket="bench", Key=key, Body=b"x", IfNoneMatch="*")
            return True
        except ClientError as exc:
            if exc.response["ResponseMetadata"]["HTTPStatusCode"] in (409, 412):
                return False
            raise

    results = [race(f"{label} PUT If-None-Match:*, 2 clients",
                    [lambda key, cl=cl: put_if_absent(cl, key) for cl in clients], args.races)]
    header(f"{label} (boto3 from this process; client CPU is boto3's)")
    small, big = os.urandom(4 * KiB), os.urandom(MiB)
    results.append(meter.run("PUT 4 KiB If-None-Match:*", args.ops, lambda i: put_if_absent(c, f"inm-{i:06d}")))
    results.append(meter.run("PUT 4 KiB", args.ops, lambda i: c.put_object(Bucket="bench", Key=f"s-{i:06d}", Body=small)))
    results.append(meter.run("PUT 1 MiB", args.big_ops, lambda i: c.put_object(Bucket="bench", Key=f"b-{i:06d}", Body=big)))
    results.append(meter.run("GET 4 KiB", args.ops, lambda i: c.get_object(Bucket="bench", Key=f"s-{i:06d}")["Body"].read()))
    for i in range(1000):
        c.put_object(Bucket="bench", Key=f"list/{i:06d}", Body=b"")

    def listing(_):
        keys = [o["Key"] for o in c.list_objects_v2(Bucket="bench", Prefix="list/", MaxKeys=1000)["Contents"]]
        assert len(keys) == 1000 and keys == sorted(keys)

    results.append(meter.run("LIST 1000 keys (1 request)", max(5, args.ops // 10), listing))
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ceph-conf", help="an existing cluster for (a) only (default: start the dev cluster)")
    ap.add_argument("--client", default="admin")
    ap.add_argument("--ops", type=int, default=200, help="ops per 4 KiB / index row")
    ap.add_argument("--big-ops", type=int, default=30, help="ops per 1 MiB row")
    ap.add_argument("--races", type=int, default=50, help="If-None-Match:* rounds of 2 clients")
    ap.add_argument("--size", type=int, default=3, help="copies of each pool (radosgw's too)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    why = ceph_unavailable()
    if why:
        print(f"s3_rados_index: skipped: {why}")
        return 0
    import rados
    from dataplane.ceph.devcluster import DevCluster

    tmp = Path(tempfile.mkdtemp(prefix="strata-test-bench-rados-index-"))
    cluster = None
    results = []
    try:
        if args.ceph_conf:
            conf, client = args.ceph_conf, args.client
            osd_pids = server_pids = lambda: []
        else:
            cluster = DevCluster(tmp / "cluster").up()
            conf, client = str(cluster.conf), cluster.client
            osd_pids = lambda: [p for n, p in cluster.pids().items() if n.startswith("osd.")]
            server_pids = lambda: [p for n, p in cluster.pids().items() if n.startswith("rgw.")]
        load = os.getloadavg()
        results += bench_rados(args, rados, conf, client, Meter(osd_pids, lambda: []))
        if cluster is not None:
            port = free_port()
            cluster.start_rgw(port, name="idxbench", replicas=args.size)
            cluster.rgw_user("bench", ACCESS, SECRET)
            results += bench_s3(args, "(b) radosgw", f"http://127.0.0.1:{port}", Meter(osd_pids, server_pids))
        else:
            print("\n(b) radosgw skipped: it runs on the dev cluster only (no --ceph-conf)")
        strata = start_strata(str(tmp), workers=1)
        try:
            results += bench_s3(args, "(ref) Strata's gateway, local bucket, 1 worker",
                                strata.endpoint, Meter(lambda: [], strata.pids))
        finally:
            strata.stop()
        load_end = os.getloadavg()
        print(f"\n(pools of size {args.size} over 3 OSDs on one machine; medians; CPU from /proc; "
              f"load average {load[0]:.2f} at the start, {load_end[0]:.2f} at the end)")
        if args.json:
            print(json.dumps(results, indent=2))
    finally:
        if cluster is not None:
            cluster.destroy()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
