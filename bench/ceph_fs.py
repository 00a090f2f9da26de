#!/usr/bin/env python3
"""CephFS benchmark: NFS through Ganesha's FSAL_CEPH against ceph-fuse straight, and a
checkpoint burst with two active metadata servers pinned apart against one.

1. Frontend cost (aim >= 0.8x): a 1 GiB write and 2,000 small-file creates, through a
   Strata NFS export of a ceph file system (Ganesha FSAL_CEPH, nfs-rs client) and straight
   into the pool's ceph-fuse mount.
2. Multi-active metadata (aim >= 1.5x): 8 jobs at once, each a process of its own
   (spawned, with its own libcephfs client), make their step directory, ``--shards`` shard
   files and a ``.metadata`` file (written aside and renamed in, as checkpoint writers do)
   and end with everything durable; files created per second with ``max_mds 2`` and the
   job directories pinned to ranks 0 and 1 alternately (``ceph.dir.pin``), against
   ``max_mds 1``. The same burst on a ``local`` (btrfs) pool in the same run shows what
   Ceph's redundancy and network path cost.
3. The development cluster's resident memory (sum of VmRSS of mon, mgr, 3 OSDs and 2 MDS,
   by their recorded PIDs), sampled every 0.2 s during the Ceph bursts (aim < 4 GiB).

The cluster is the development cluster (replicated:3 over 3 CRUSH hosts on this one machine)
started in ``/tmp/strata-test-*`` and removed at the end. Each measure runs ``--repeat``
times, alternating sides; medians are printed with their ratio.

    .venv/bin/python bench/ceph_fs.py [--write-mib 1024] [--creates 2000] [--shards 500]
                                      [--repeat 3] [--only frontend|burst]
"""

from __future__ import annotations

import argparse
import ctypes
import json
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

from dataplane.ceph import bindings as ceph_bindings  # noqa: E402
from dataplane.ceph.driver import CephDriver  # noqa: E402
from dataplane.ceph.devcluster import DevCluster  # noqa: E402
from dataplane.local.directory import DirectoryDriver  # noqa: E402
from dataplane.local.driver import LocalDriver  # noqa: E402
from dataplane.driver import DeviceSpec  # noqa: E402
from plumbing.process import free_port  # noqa: E402
from services.file.runtime import (CephExportSource, NfsClientRule, NfsExport,  # noqa: E402
                                   NfsServer, NfsSettings)

MiB = 1 << 20
GiB = 1 << 30
CHUNK = 4 * MiB
JOBS = 8
SHARD = b"s" * 4096
METADATA = b"m" * 16384   # the checkpoint's index of its shards (DCP's .metadata)


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
# Each job is a process of its own started with the 'spawn' method: a forked child inherits
# the parent's librados/libcephfs threads and locks mid-flight and cannot connect; a spawned
# one opens its own libcephfs mount, as a training job's rank does.

def _burst_job_ceph(conf, client, directory, shards, ready, go, out):
    """One job on CephFS through its own libcephfs client: make the step directory, write
    ``shards`` shard files and a ``.metadata`` file (written aside, renamed in), then make
    it all durable (sync_fs)."""
    cephfs = ceph_bindings.load("cephfs")
    fs = cephfs.LibCephFS(conffile=conf, auth_id=client)
    fs.mount()
    ready.set()
    go.wait()
    fs.mkdir(directory.encode(), 0o755)
    for i in range(shards):
        fd = fs.open(f"{directory}/shard-{i}.distcp".encode(), "w", 0o644)
        fs.write(fd, SHARD, 0)
        fs.close(fd)
    fd = fs.open(f"{directory}/.metadata.tmp".encode(), "w", 0o644)
    fs.write(fd, METADATA, 0)
    fs.close(fd)
    fs.rename(f"{directory}/.metadata.tmp".encode(), f"{directory}/.metadata".encode())
    fs.sync_fs()
    out.put(time.perf_counter())
    fs.shutdown()


def _burst_job_local(directory, shards, ready, go, out):
    """The same job on a local file system path (syncfs of that file system at the end)."""
    ready.set()
    go.wait()
    os.mkdir(directory)
    for i in range(shards):
        with open(os.path.join(directory, f"shard-{i}.distcp"), "wb") as f:
            f.write(SHARD)
    with open(os.path.join(directory, ".metadata.tmp"), "wb") as f:
        f.write(METADATA)
    os.rename(os.path.join(directory, ".metadata.tmp"), os.path.join(directory, ".metadata"))
    fd = os.open(directory, os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs")
    finally:
        os.close(fd)
    out.put(time.perf_counter())


def burst(target, args_of, shards, sampler=None) -> float:
    """JOBS spawned processes each make their step directory and ``shards`` + 1 files at
    once (started together once every one is connected); files created per second, from
    the start until the last job's files are durable."""
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs, readies = [], []
    for job in range(JOBS):
        ready = ctx.Event()
        readies.append(ready)
        procs.append(ctx.Process(target=target, args=(*args_of(job), shards, ready, go, out)))
    for p in procs:
        p.start()
    for p, r in zip(procs, readies):
        if not r.wait(120):
            for q in procs:
                q.kill()
            raise SystemExit(f"a burst job did not get ready (exit code {p.exitcode})")
    if sampler:
        sampler.start()
    start = time.perf_counter()
    go.set()
    ends = []
    for _ in procs:
        ends.append(out.get(timeout=600))
    took = max(ends) - start
    if sampler:
        sampler.stop()
    for p in procs:
        p.join(120)
    if any(p.exitcode for p in procs):
        raise SystemExit("a burst job failed")
    return JOBS * (shards + 1) / took


class RssSampler:
    """The largest sum of the cluster daemons' resident memory seen while running, and each
    daemon's share of a CPU over that time."""

    def __init__(self, daemons: dict):
        self.daemons = daemons
        self.pids, self.peak, self._stop = list(daemons.values()), 0, threading.Event()
        self._thread = None
        self.cpu_share: dict = {}

    def rss(self) -> int:
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
        self._cpu0, self._t0 = cpu_seconds(self.daemons), time.monotonic()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.2)

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())
        took, cpu1 = time.monotonic() - self._t0, cpu_seconds(self.daemons)
        self.cpu_share = {n: (cpu1[n] - self._cpu0.get(n, 0)) / took for n in cpu1}


def cpu_seconds(pids: dict) -> dict:
    """CPU time (user + system, seconds) each daemon has used so far, by name."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    for name, pid in pids.items():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            used[name] = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            pass
    return used


def requests_by_rank(files) -> dict:
    """Client requests each active MDS rank has handled so far (its perf counters)."""
    counts = {}
    for rank in files.active_ranks():
        rc, out, _err = files.fs.mds_command(str(rank), json.dumps(
            {"prefix": "perf dump", "format": "json"}), b"")
        if rc == 0:
            counts[rank] = json.loads(out)["mds_server"]["handle_client_request"]
    return counts


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


def frontend(fs, source, tmp, args) -> None:
    """NFS through Ganesha FSAL_CEPH against the pool's ceph-fuse mount."""
    nfs = NfsServer(NfsSettings(state_dir=str(tmp / "nfs"), port=free_port(),
                                bind_address="127.0.0.1"))
    nfs.start([NfsExport(1, fs.path, "/bench",
                         [NfsClientRule("127.0.0.1", "rw", "no_root_squash")],
                         ceph=CephExportSource(**source))])
    try:
        port = nfs.settings.port
        total = args.write_mib * MiB
        write, creates = f"{args.write_mib} MiB write MB/s", f"{args.creates} creates/s"
        runs = {write: {"NFS FSAL_CEPH": [], "ceph-fuse": []},
                creates: {"NFS FSAL_CEPH": [], "ceph-fuse": []}}
        for i in range(args.repeat):
            sides = [("NFS FSAL_CEPH", lambda: write_big_nfs(port, f"big{i}", total) / 1e6,
                      lambda: creates_nfs(port, f"n{i}", args.creates)),
                     ("ceph-fuse", lambda: write_big_fuse(fs.path, f"big{i}", total) / 1e6,
                      lambda: creates_fuse(fs.path, f"c{i}", args.creates))]
            for side, big, create in (sides if i % 2 == 0 else sides[::-1]):
                runs[write][side].append(big())
                runs[creates][side].append(create())
        print(f"{'frontend':<22}{'NFS FSAL_CEPH':>15}{'ceph-fuse':>12}{'ratio':>8}")
        for name, sides in runs.items():
            n, f = (statistics.median(sides[s]) for s in ("NFS FSAL_CEPH", "ceph-fuse"))
            print(f"{name:<22}{n:>15.1f}{f:>12.1f}{n / f:>7.2f}x", flush=True)
    finally:
        nfs.stop()


def local_pool(tmp):
    """(driver, pool, file system path) of the burst's comparison: a ``local`` (btrfs)
    pool on an image, or a ``directory`` pool when no loop device is free."""
    try:
        local = LocalDriver(tmp / "local")
        local.create_pool("lb", [DeviceSpec("image:4G")])
        return local, "local btrfs", Path(local.create_filesystem("lb", "b").path)
    except Exception as exc:  # noqa: BLE001 - said, then the fallback is measured
        print(f"note: no local btrfs pool ({exc}); the directory driver instead",
              file=sys.stderr)
        local = DirectoryDriver(tmp / "directory")
        local.create_pool("lb")
        return local, "directory (ext4)", Path(local.create_filesystem("lb", "b").path)


def checkpoint_bursts(cluster, files, fs, source, tmp, args) -> None:
    """8 jobs at once, 2 MDS with job directories pinned apart vs 1 MDS vs a local pool;
    the cluster's resident memory during the Ceph bursts."""
    conf, client = str(cluster.conf), cluster.client
    ckpt = Path(fs.path) / "ckpt"
    pins = {}
    for job in range(JOBS):       # job directories, made (and pinned) when a job is created
        (ckpt / f"job-{job}").mkdir(parents=True)
        # an MDS hands a pinned directory over once it holds something, not while empty
        (ckpt / f"job-{job}" / ".job").write_text(f"job-{job}\n")
        pins[f"fs/b/ckpt/job-{job}"] = job % 2
    cephfs_dir = f"{source['path']}/ckpt"
    sampler = RssSampler(cluster.pids())
    idle = sampler.rss()
    local, local_name, lpath = local_pool(tmp)
    for job in range(JOBS):
        (lpath / f"job-{job}").mkdir()
    sides = ["2 MDS pinned", "1 MDS", local_name]
    bursts = {side: [] for side in sides}
    peaks = []
    try:
        for i in range(args.repeat):
            order = sides[:2] if i % 2 == 0 else sides[1::-1]
            for side in order + [local_name]:
                step = f"step-{i}"
                if side == local_name:
                    rate = burst(_burst_job_local,
                                 lambda j: (str(lpath / f"job-{j}" / step),), args.shards)
                else:
                    set_mds(files, 2 if side.startswith("2") else 1, pins)
                    step += "-2" if side.startswith("2") else "-1"
                    sampler.peak = 0
                    before = requests_by_rank(files)
                    rate = burst(_burst_job_ceph,
                                 lambda j: (conf, client, f"{cephfs_dir}/job-{j}/{step}"),
                                 args.shards, sampler)
                    peaks.append(sampler.peak)
                    after = requests_by_rank(files)
                    served = ", ".join(f"rank {r}: {after[r] - before.get(r, 0)}"
                                       for r in sorted(after))
                    served += "; share of a CPU during it: " + ", ".join(
                        f"{n} {share:.0%}" for n, share in sorted(sampler.cpu_share.items()))
                bursts[side].append(rate)
                print(f"  round {i + 1}: {side:<18}{rate:>9.0f} creates/s"
                      + (f", cluster RSS peak {sampler.peak / GiB:.2f} GiB, client requests "
                         f"by MDS {served}" if side != local_name else ""), flush=True)
    finally:
        for name in local.list_filesystems("lb"):
            local.delete_filesystem("lb", name)
        local.destroy_pool("lb")
    med = {k: statistics.median(v) for k, v in bursts.items()}
    print(f"\ncheckpoint burst: {JOBS} jobs at once, each its step directory + {args.shards} "
          f"shard files of {len(SHARD)} B + .metadata (renamed in), durable at the end")
    for side, rate in med.items():
        print(f"  {side:<18}{rate:>10.0f} creates/s (median of {args.repeat})")
    print(f"  2 MDS pinned / 1 MDS: {med[sides[0]] / med[sides[1]]:.2f}x (aim >= 1.5x)")
    print(f"  ceph 2 MDS / {local_name}: {med[sides[0]] / med[local_name]:.3f}x; "
          f"ceph 1 MDS / {local_name}: {med[sides[1]] / med[local_name]:.3f}x")
    print(f"  cluster resident memory (mon, mgr, 3 OSDs, 2 MDS): idle before {idle / GiB:.2f} "
          f"GiB; peak during a burst: median {statistics.median(peaks) / GiB:.2f} GiB, "
          f"max {max(peaks) / GiB:.2f} GiB (aim < 4 GiB)")
    print(f"  (replicated:3 over 3 CRUSH hosts on this one machine, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at the end)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-mib", type=int, default=1024)
    ap.add_argument("--creates", type=int, default=2000)
    ap.add_argument("--shards", type=int, default=500, help="files per job in a burst")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("frontend", "burst"), help="run one part only")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="strata-test-bench-cephfs-"))
    cluster = drv = None
    try:
        cluster = DevCluster(tmp / "cluster").up()
        drv = CephDriver(tmp / "state", ceph_conf=str(cluster.conf), client=cluster.client,
                         pool_prefix=f"bench{int(time.time())}.")
        drv.create_pool("bench", [], redundancy="replicated:3", failure_domain="host")
        fs = drv.create_filesystem("bench", "b")
        files = drv._files(drv._load("bench"))
        source = drv.filesystem_source("bench", "b")
        if args.only != "burst":
            frontend(fs, source, tmp, args)
            files.evict_dead_local_clients()
        if args.only != "frontend":
            checkpoint_bursts(cluster, files, fs, source, tmp, args)
    finally:
        if drv is not None:    # the cluster goes whole below: only unmount the pool
            try:
                drv.deactivate_pool("bench")
            except Exception as exc:
                print(f"cleanup: {exc}", file=sys.stderr)
        if cluster is not None:
            cluster.destroy()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
