#!/usr/bin/env python3
"""Ceph RBD benchmark: a Strata NBD export of an RBD volume against ``rbd bench`` straight
to the cluster (librbd with no frontend: the limit Strata's frontend can reach).

Workloads, the same on both sides (queue depth ``--depth``, same image, same bytes):
4 MiB sequential write and read, 4 KiB random write and read.

- limit: ``rbd bench --io-type write|read --io-size S --io-threads D --io-pattern
  seq|rand --io-total T``;
- Strata: a ``QemuStorageDaemon`` NBD export of the volume (qemu's rbd driver), driven by
  fio's ``nbd`` engine with the same block size, depth and total.

The cluster is the development cluster (``dataplane.ceph.devcluster``: mon, mgr, 3 OSDs
each under its own CRUSH host, replicated:3 over hosts) started in ``/tmp/strata-test-*``
and removed at the end, or an existing one with ``--ceph-conf`` (a pool is created and
deleted). Each job runs ``--repeat`` times, alternating sides; medians are printed with the
ratio Strata / rbd bench (aim >= 0.8).

    .venv/bin/python bench/ceph_rbd.py [--total-mib 512] [--small-total-mib 32] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataplane.ceph.driver import CephDriver  # noqa: E402
from dataplane.ceph.devcluster import DevCluster  # noqa: E402
from plumbing.process import free_port  # noqa: E402
from services.block.transports.qsd import QemuStorageDaemon  # noqa: E402

MiB = 1 << 20
SIZES = {"4M": 4 * MiB, "128K": 128 * 1024, "4K": 4096}
JOBS = [("4M seq write", "write", "4M", "seq"), ("4M seq read", "read", "4M", "seq"),
        ("4K rand write", "write", "4K", "rand"), ("4K rand read", "read", "4K", "rand")]


def rbd_bench(conf, client, image, io_type, bs, pattern, total, depth) -> float:
    """Bytes per second ``rbd bench`` reports."""
    out = subprocess.run(["rbd", "-c", conf, "--id", client, "bench", "--io-type", io_type,
                          "--io-size", bs, "--io-threads", str(depth), "--io-pattern", pattern,
                          "--io-total", str(total), image], capture_output=True, text=True,
                         timeout=900)
    if out.returncode:
        raise SystemExit(f"rbd bench failed: {out.stderr}")
    # the last line: "elapsed: 1   ops: 8   ops/sec: 7.63   bytes/sec: 31 MiB/s"; the rounded
    # bytes/sec is too coarse at 4 KiB, so compute it from ops/sec and the I/O size
    m = re.search(r"elapsed:\s*([\d.]+)\s+ops:\s*(\d+)\s+ops/sec:\s*([\d.]+)", out.stdout)
    if not m:
        raise SystemExit(f"cannot read rbd bench's output: {out.stdout[-500:]}")
    return float(m.group(3)) * SIZES[bs]


def fio_nbd(uri, io_type, bs, pattern, total, depth) -> float:
    """Bytes per second fio's nbd engine reaches on the export."""
    rw = {"seq": io_type, "rand": "rand" + io_type}[pattern]
    out = subprocess.run(["fio", "--name=b", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}",
                          f"--bs={bs}", f"--iodepth={depth}", f"--size={total}",
                          "--group_reporting", "--output-format=json", "--randrepeat=0"],
                         capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise SystemExit(f"fio failed: {out.stderr}")
    job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    return job["read" if io_type == "read" else "write"]["bw_bytes"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ceph-conf", help="an existing cluster (default: start the dev cluster)")
    ap.add_argument("--client", default="admin")
    ap.add_argument("--total-mib", type=int, default=512, help="bytes per 4M job")
    ap.add_argument("--small-total-mib", type=int, default=32, help="bytes per 4K job")
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="strata-test-bench-ceph-"))
    cluster = None
    qsd = None
    drv = None
    try:
        if args.ceph_conf:
            conf, client = args.ceph_conf, args.client
        else:
            cluster = DevCluster(tmp / "cluster").up()
            conf, client = str(cluster.conf), cluster.client
        drv = CephDriver(tmp / "state", ceph_conf=conf, client=client,
                         pool_prefix=f"bench{int(time.time())}.")
        drv.create_pool("bench", [], redundancy="replicated:3", failure_domain="host")
        size = max(args.total_mib, args.small_total_mib) * MiB
        vol = drv.create_volume("bench", "disk", size)
        image = f"{drv._load('bench')['rados_pool']}/disk"
        # fill it once, so reads read data on both sides
        rbd_bench(conf, client, image, "write", "4M", "seq", size, args.depth)
        qsd = QemuStorageDaemon(tmp / "qsd", nbd_port=free_port())
        qsd.start()
        uri = qsd.export("disk", vol.path)["uri"]
        runs: dict = {name: {"rbd bench": [], "Strata NBD": []} for name, *_ in JOBS}
        for i in range(args.repeat):
            for name, io_type, bs, pattern in JOBS:
                total = (args.total_mib if bs == "4M" else args.small_total_mib) * MiB
                sides = [("rbd bench", lambda: rbd_bench(conf, client, image, io_type, bs,
                                                         pattern, total, args.depth)),
                         ("Strata NBD", lambda: fio_nbd(uri, io_type, bs, pattern, total,
                                                        args.depth))]
                for side, run in (sides if i % 2 == 0 else sides[::-1]):
                    runs[name][side].append(run())
        medians = {name: {side: statistics.median(v) for side, v in sides.items()}
                   for name, sides in runs.items()}
        print(f"{'workload':<16}{'rbd bench MB/s':>16}{'Strata NBD MB/s':>17}{'ratio':>8}")
        for name, m in medians.items():
            ratio = m["Strata NBD"] / m["rbd bench"] if m["rbd bench"] else 0
            print(f"{name:<16}{m['rbd bench'] / 1e6:>16.1f}{m['Strata NBD'] / 1e6:>17.1f}"
                  f"{ratio:>7.2f}x")
        print(f"(medians of {args.repeat}; replicated:3 over 3 CRUSH hosts on one machine; "
              "aim >= 0.8x)")
        if args.json:
            print(json.dumps({"medians": medians, "runs": runs}, indent=2))
    finally:
        if qsd is not None:
            qsd.stop()
        if drv is not None:
            try:
                drv.delete_volume("bench", "disk")
                drv.destroy_pool("bench")
            except Exception as exc:
                print(f"cleanup: {exc}", file=sys.stderr)
        if cluster is not None:
            cluster.destroy()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
