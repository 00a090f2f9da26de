#!/usr/bin/env python3
"""CephFS benchmark: NFS through Ganesha's FSAL_CEPH against ceph-fuse straight, and a
checkpoint burst with two active metadata servers pinned apart against one.

1. Frontend cost (aim >= 0.8x): a 1 GiB write and 2,000 small-file creates, through a
   Strata NFS export of a ceph file system (Ganesha FSAL_CEPH, nfs-rs client) and straight
   into the pool's ceph-fuse mount.
2. Multi-active metadata (aim >= 1.5x): 8 jobs, one process each with its own libcephfs
   client, create ``--shards`` shard files in their job's directory at once; creates/s with
   ``max_mds 2`` and job directories pinned round-robin to ranks 0 and 1, against
   ``max_mds 1``. The same burst on a ``local`` (btrfs) pool shows what Ceph's redundancy
   and network path cost.
3. The development cluster's resident memory (mon, mgr, 3 OSDs, 2 MDS), sampled during
   the bursts (aim < 4 GiB).

The cluster is the development cluster (replicated:3 over 3 CRUSH hosts on this one machine)
started in ``/tmp/strata-test-*`` and removed at the end. Each measure runs ``--repeat``
times, alternating sides; medians are printed with their ratio.

    .venv/bin/python bench/ceph_fs.py [--write-mib 1024] [--creates 2000] [--shards 500]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataplane import ceph_bindings  # noqa: E402
from dataplane.ceph import CephDriver  # noqa: E402
from dataplane.ceph_devcluster import DevCluster  # noqa: E402
from dataplane.local import LocalDriver  # noqa: E402
from dataplane.driver import DeviceSpec  # noqa: E402
from plumbing.process import free_port  # noqa: E402
from services.file.runtime import (CephExportSource, NfsClientRule, NfsExport,  # noqa: E402
                                   NfsServer, NfsSettings)

MiB = 1 << 20
CHUNK = 4 * MiB
JOBS = 8
SHARD = b"s" * 4096


def nfs_client(port: int, pseudo: str):
    import nfs_rs
    return nfs_rs.Client.connect(f"nfs://127.0.0.1:{port}{pseudo}?version=4.1",
                                 connect_timeout=10, operation_timeout=120)


def write_big_nfs(port, name, total) -> float:
    block = os.urandom(CHUNK)
    client = nfs_client(port, "/bench")
    start = time.perf_counter()
    with client.open(name, "wb") as f:
        for _ in range(total // CHUNK):
            f.write(block)
    took = time.perf_counter() - start
    client.remove(name)
    return total / took


def write_big_fuse(directory, name, total) -> float:
    block = os.urandom(CHUNK)
    path = os.path.join(directory, name)
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(total // CHUNK):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())  # NFS COMMITs on close: count the same durability here
    took = time.perf_counter() - start
    os.unlink(path)
    return total / took


def creates_nfs(port, sub, count) -> float:
    client = nfs_client(port, "/bench")
    client.mkdir(sub)
    start = time.perf_counter()
    for i in range(count):
        with client.open(f"{sub}/f{i}", "wb") as f:
            f.write(b"x")
    return count / (time.perf_counter() - start)


def creates_fuse(directory, sub, count) -> float:
    base = os.path.join(directory, sub)
    os.mkdir(base)
    start = time.perf_counter()
    for i in range(count):
        with open(os.path.join(base, f"f{i}"), "wb") as f:
            f.write(b"x")
    return count / (time.perf_counter() - start)


# -- the checkpoint burst ------------------------------------------------------------------

def _burst_job_ceph(conf, client, directory, shards, ready, go, out):
    cephfs = ceph_bindings.load("cephfs")
    fs = cephfs.LibCephFS(conffile=conf, auth_id=client)
    fs.mount()
    ready.set()
    go.wait()
    start = time.perf_counter()
    for i in range(shards):
        fd = fs.open(f"{directory}/shard-{i}".encode(), "w", 0o644)
        fs.write(fd, SHARD, 0)
        fs.close(fd)
    out.put(time.perf_counter() - start)
    fs.shutdown()


def _burst_job_local(directory, shards, ready, go, out):
    ready.set()
    go.wait()
    start = time.perf_counter()
    for i in range(shards):
        with open(os.path.join(directory, f"shard-{i}"), "wb") as f:
            f.write(SHARD)
    out.put(time.perf_counter() - start)


def burst(target, args_of, shards, sampler=None) -> float:
    """8 processes create ``shards`` files each at once; total creates per second."""
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs, readies = [], []
    for job in range(JOBS):
        ready = ctx.Event()
        readies.append(ready)
        procs.append(ctx.Process(target=target, args=(*args_of(job), shards, ready, go, out)))
    for p in procs:
        p.start()
    for r in readies:
        r.wait(60)
    if sampler:
        sampler.start()
    start = time.perf_counter()
    go.set()
    for p in procs:
        p.join(600)
    took = time.perf_counter() - start
    if sampler:
        sampler.stop()
    if any(p.exitcode for p in procs):
        raise SystemExit("a burst job failed")
    return JOBS * shards / took


class RssSampler:
    """The largest sum of the cluster daemons' resident memory seen while running."""

    def __init__(self, pids):
        self.pids, self.peak, self._stop = list(pids), 0, threading.Event()
        self._thread = None

    def _rss(self) -> int:
        total = 0
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1]) * 1024
            except OSError:
                pass
        return total

    def start(self):
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(0.2)

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def set_mds(files, count, pins):
    """``max_mds count`` and each job directory pinned (or unpinned, -1), then wait until
    the ranks serve what they should."""
    files.set_max_mds(count)
    deadline = time.monotonic() + 120
    while len(files.active_ranks()) != count:
        if time.monotonic() > deadline:
            raise SystemExit(f"the CephFS did not reach {count} active MDS")
        time.sleep(1)
    for rel, rank in pins.items():
        files.pin("bench", rel, rank if count > 1 else -1)
    if count > 1:
        deadline = time.monotonic() + 180
        while any(files.subtree_ranks("bench").get(rel) != rank for rel, rank in pins.items()):
            if time.monotonic() > deadline:
                print("warning: not every job directory is on its rank yet: "
                      f"{files.subtree_ranks('bench')}", file=sys.stderr)
                break
            time.sleep(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-mib", type=int, default=1024)
    ap.add_argument("--creates", type=int, default=2000)
    ap.add_argument("--shards", type=int, default=500, help="files per job in a burst")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="strata-test-bench-cephfs-"))
    cluster = drv = local = nfs = None
    try:
        cluster = DevCluster(tmp / "cluster").up()
        conf, client = str(cluster.conf), cluster.client
        drv = CephDriver(tmp / "state", ceph_conf=conf, client=client,
                         pool_prefix=f"bench{int(time.time())}.")
        drv.create_pool("bench", [], redundancy="replicated:3", failure_domain="host")
        fs = drv.create_filesystem("bench", "b")
        files = drv._files(drv._load("bench"))
        source = drv.filesystem_source("bench", "b")
        nfs = NfsServer(NfsSettings(state_dir=str(tmp / "nfs"), port=free_port(),
                                    bind_address="127.0.0.1"))
        nfs.start([NfsExport(1, fs.path, "/bench",
                             [NfsClientRule("127.0.0.1", "rw", "no_root_squash")],
                             ceph=CephExportSource(**source))])
        port = nfs.settings.port

        total = args.write_mib * MiB
        runs = {"1 GiB write MB/s": {"NFS FSAL_CEPH": [], "ceph-fuse": []},
                f"{args.creates} creates/s": {"NFS FSAL_CEPH": [], "ceph-fuse": []}}
        for i in range(args.repeat):
            sides = [("NFS FSAL_CEPH", lambda: write_big_nfs(port, f"big{i}", total) / 1e6,
                      lambda: creates_nfs(port, f"n{i}", args.creates)),
                     ("ceph-fuse", lambda: write_big_fuse(fs.path, f"big{i}", total) / 1e6,
                      lambda: creates_fuse(fs.path, f"c{i}", args.creates))]
            for side, write, create in (sides if i % 2 == 0 else sides[::-1]):
                runs["1 GiB write MB/s"][side].append(write())
                runs[f"{args.creates} creates/s"][side].append(create())
        print(f"{'frontend':<22}{'NFS FSAL_CEPH':>15}{'ceph-fuse':>12}{'ratio':>8}")
        for name, sides in runs.items():
            n, f = (statistics.median(sides[s]) for s in ("NFS FSAL_CEPH", "ceph-fuse"))
            print(f"{name:<22}{n:>15.1f}{f:>12.1f}{n / f:>7.2f}x")
        nfs.stop()
        nfs = None
        files.evict_dead_local_clients()

        # the checkpoint burst: 8 jobs, each in its own pinned directory
        ckpt = Path(fs.path) / "ckpt"
        pins = {}
        for job in range(JOBS):
            (ckpt / f"job-{job}").mkdir(parents=True)
            pins[f"fs/b/ckpt/job-{job}"] = job % 2
        cephfs_dir = f"{source['path']}/ckpt"
        sampler = RssSampler(cluster.pids().values())
        local_state = tmp / "local"
        local = LocalDriver(local_state)
        local.create_pool("lb", [DeviceSpec("image:4G")])
        lpath = Path(local.create_filesystem("lb", "b").path)
        bursts = {"2 MDS pinned": [], "1 MDS": [], "local btrfs": []}
        for i in range(args.repeat):
            order = ["2 MDS pinned", "1 MDS"] if i % 2 == 0 else ["1 MDS", "2 MDS pinned"]
            for side in order + ["local btrfs"]:
                step = f"r{i}-{side[0]}"
                if side == "local btrfs":
                    for job in range(JOBS):
                        (lpath / f"job-{job}" / step).mkdir(parents=True)
                    rate = burst(_burst_job_local,
                                 lambda j: (str(lpath / f"job-{j}" / step),), args.shards)
                else:
                    set_mds(files, 2 if side.startswith("2") else 1, pins)
                    for job in range(JOBS):
                        (ckpt / f"job-{job}" / step).mkdir()
                    rate = burst(_burst_job_ceph,
                                 lambda j: (conf, client, f"{cephfs_dir}/job-{j}/{step}"),
                                 args.shards, sampler)
                bursts[side].append(rate)
        med = {k: statistics.median(v) for k, v in bursts.items()}
        print(f"\ncheckpoint burst: {JOBS} jobs x {args.shards} shard files of 4 KiB")
        for side, rate in med.items():
            print(f"  {side:<14}{rate:>10.0f} creates/s")
        print(f"  2 MDS pinned / 1 MDS: {med['2 MDS pinned'] / med['1 MDS']:.2f}x (aim >= 1.5x)")
        print(f"  ceph (2 MDS) / local btrfs: {med['2 MDS pinned'] / med['local btrfs']:.2f}x")
        print(f"  cluster resident memory during the bursts (peak): "
              f"{sampler.peak / (1 << 30):.2f} GiB (aim < 4 GiB)")
        print(f"(medians of {args.repeat}; replicated:3 over 3 CRUSH hosts on one machine)")
    finally:
        if nfs is not None:
            nfs.stop()
        if local is not None:
            try:
                for name in local.list_filesystems("lb"):
                    local.delete_filesystem("lb", name)
                local.destroy_pool("lb")
            except Exception as exc:
                print(f"cleanup: {exc}", file=sys.stderr)
        if drv is not None:
            try:
                drv._files(drv._load("bench")).evict_dead_local_clients()
                for name in drv.list_filesystems("bench"):
                    drv.delete_filesystem("bench", name)
                drv.destroy_pool("bench")
            except Exception as exc:
                print(f"cleanup: {exc}", file=sys.stderr)
        if cluster is not None:
            cluster.destroy()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
