#!/usr/bin/env python3
"""Every node an entry (issue 36, "Measure"): a checkpoint burst through 3 Ganesha entries
against 1, server CPU per MiB written, and NFS through Ganesha against ceph-fuse.

One development Ceph cluster (``dataplane.ceph.devcluster``: mon, mgr, 3 OSDs under hosts
host0..2, 2 MDS) with a ``replicated:3`` pool and a file system on it, and three Ganesha
servers as three nodes serve them: each bound to its own address (127.0.0.2..4, as the
process nodes of tests/cluster_support.py), FSAL_CEPH, the ``rados_cluster`` recovery
backend with one grace database in the pool's RADOS pool (what a cluster node runs: the
same ``NfsServer`` and ``NfsCluster`` settings). No plane: the bench measures the data path.

1. Entries: ``--ranks`` processes (spawned, each with its own nfs-rs client, as a training
   job's ranks) write a shard of ``--shard-mib`` each at once, in calls of ``--call-mib``;
   aggregate MB/s from the start until the last shard is durable, spread over the 3 entries
   (rank r on entry r % 3) against all through entry 1; the same bytes, alternating sides
   (aim >= 0.9x). Each server's CPU (utime + stime from /proc) per MiB it took, and the Ceph
   daemons' CPU per MiB.
2. Server CPU per MiB of the single-node paths in the same run: the same burst through one
   Ganesha (FSAL_VFS) on a ``directory`` pool, and S3 PUTs of the same shards to the S3
   gateway with its data on the Ceph pool's file system (through its ceph-fuse mount, where
   the gateway's CPU and ceph-fuse's both count), on the ``directory`` pool, and in the Ceph
   pool's RADOS pool (the RADOS store, librados inside the gateway).
3. Frontend: a 1 GiB write through one entry against ceph-fuse straight (``write`` + one
   ``fsync``), with nfs-rs called with 4 MiB (one WRITE, then its COMMIT) and with
   ``--big-call-mib`` per call (8 WRITEs in flight, one COMMIT): nfs-rs makes every
   ``write()`` call durable before it returns. And ``--creates`` one-byte files created
   through NFS against ceph-fuse, with the MDS requests and Ganesha CPU per create.

Each measure runs ``--repeat`` times, sides alternating; medians and ratios are printed and,
with ``--record``, appended to ``bench/results/cluster_entries.jsonl`` (``.md`` rewritten).

    .venv/bin/python bench/cluster_entries.py [--ranks 6] [--shard-mib 32] [--repeat 3]
                                              [--record]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import results  # noqa: E402
from bench.ceph_fs import cpu_seconds, requests_by_rank  # noqa: E402
from bench.s3_servers import process_tree_cpu  # noqa: E402
from dataplane.ceph.devcluster import DevCluster  # noqa: E402
from dataplane.local.directory import DirectoryDriver  # noqa: E402
from plumbing.process import free_port  # noqa: E402
from services.file.runtime import (CephExportSource, NfsClientRule, NfsCluster,  # noqa: E402
                                   NfsExport, NfsServer, NfsSettings)
from services.file.runtime.grace import GraceDb  # noqa: E402

MiB = 1 << 20
ENTRIES = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
GRACE = 10          # seconds of grace and lease: short, the bench starts them all at once
ACCESS, SECRET = "BENCHKEY", "bench-secret-key"


def connect(address, port):
    import nfs_rs
    return nfs_rs.Client.connect(f"nfs://{address}:{port}/bench?version=4.1",
                                 connect_timeout=10, operation_timeout=300)


# -- one rank of a burst (a spawned process) ----------------------------------------------

def _rank_nfs(address, port, name, size, call, ready, go, out):
    block = os.urandom(call)
    client = None
    for _ in range(60):             # a server still in its first grace refuses OPENs
        try:
            client = connect(address, port)
            break
        except Exception:  # noqa: BLE001 - retried, then raised below
            time.sleep(1)
    client = client or connect(address, port)
    ready.set()
    go.wait()
    with client.open(name, "wb") as f:
        for _ in range(size // call):
            f.write(block)
    out.put(time.perf_counter())


def _rank_s3(endpoint, key, size, ready, go, out):
    import boto3
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS,
                      aws_secret_access_key=SECRET, region_name="us-east-1")
    body = os.urandom(size)
    ready.set()
    go.wait()
    s3.put_object(Bucket="bench", Key=key, Body=body)
    out.put(time.perf_counter())


def run_ranks(target, args_of, ranks, cpu_of) -> tuple[float, dict]:
    """``ranks`` spawned processes at once; (seconds from go to the last durable shard,
    CPU seconds used meanwhile by each server of ``cpu_of`` (name -> callable))."""
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    procs, readies = [], []
    for r in range(ranks):
        ready = ctx.Event()
        readies.append(ready)
        procs.append(ctx.Process(target=target, args=(*args_of(r), ready, go, out)))
    for p in procs:
        p.start()
    for p, ready in zip(procs, readies):
        if not ready.wait(180):
            for q in procs:
                q.kill()
            raise SystemExit(f"a rank did not get ready (exit code {p.exitcode})")
    before = {n: f() for n, f in cpu_of.items()}
    start = time.perf_counter()
    go.set()
    ends = [out.get(timeout=900) for _ in procs]
    took = max(ends) - start
    used = {n: f() - before[n] for n, f in cpu_of.items()}
    for p in procs:
        p.join(60)
    if any(p.exitcode for p in procs):
        raise SystemExit("a rank failed")
    return took, used


def pid_cpu(pid) -> float:
    return cpu_seconds({"p": pid}).get("p", 0.0)


def ceph_cpu(cluster) -> float:
    return sum(cpu_seconds(cluster.pids()).values())


def ceph_fuse_pid(under: str) -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"ceph-fuse") and any(under.encode() in a for a in argv):
                return int(entry)
    return None


def end_pid(pid, grace: float = 15) -> None:
    """Wait for process ``pid`` (the pool's ceph-fuse, after its lazy unmount) to end;
    SIGTERM then SIGKILL after ``grace`` seconds: left alone, it outlives the cluster."""
    if pid is None:
        return
    deadline = time.monotonic() + grace
    for sig in (signal.SIGTERM, signal.SIGKILL):
        while time.monotonic() < deadline:
            if not os.path.exists(f"/proc/{pid}"):
                return
            time.sleep(0.2)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 5


# -- the parts ------------------------------------------------------------------------------

def entries_part(servers, cluster, args, run) -> None:
    size, call, ranks = args.shard_mib * MiB, args.call_mib * MiB, args.ranks
    total_mib = ranks * args.shard_mib
    sides = {"3 entries": lambda r: r % 3, "1 entry": lambda r: 0}
    rates = {s: [] for s in sides}
    per_node = {s: [] for s in sides}      # Ganesha CPU ms per MiB, each busy node
    ceph = {s: [] for s in sides}
    cpu_of = {f"ganesha{i + 1}": (lambda s=s: pid_cpu(s.pid)) for i, s in enumerate(servers)}
    cpu_of["ceph"] = lambda: ceph_cpu(cluster)
    for i in range(args.repeat):
        for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            pick = sides[side]
            took, used = run_ranks(
                _rank_nfs, lambda r: (ENTRIES[pick(r)], servers[pick(r)].settings.port,
                                      f"{side[0]}-{i}-rank{r}", size, call), ranks, cpu_of)
            rates[side].append(total_mib * MiB / took / 1e6)
            mib_by = {}
            for r in range(ranks):
                mib_by[pick(r)] = mib_by.get(pick(r), 0) + args.shard_mib
            cpu = {n: used[f"ganesha{n + 1}"] * 1000 / m for n, m in mib_by.items()}
            per_node[side].extend(cpu.values())
            ceph[side].append(used["ceph"] * 1000 / total_mib)
            print(f"  round {i + 1}: {side:<10}{rates[side][-1]:>8.1f} MB/s, Ganesha CPU ms/MiB "
                  + ", ".join(f"node{n + 1} {v:.1f}" for n, v in sorted(cpu.items()))
                  + f"; Ceph daemons {ceph[side][-1]:.1f} ms/MiB", flush=True)
    m = {s: statistics.median(v) for s, v in rates.items()}
    run["entries"] = {"ranks": ranks, "shard_mib": args.shard_mib, "call_mib": args.call_mib,
                      "mbps_3": m["3 entries"], "mbps_1": m["1 entry"],
                      "ratio": m["3 entries"] / m["1 entry"],
                      "ganesha_ms_per_mib_3": statistics.median(per_node["3 entries"]),
                      "ganesha_ms_per_mib_1": statistics.median(per_node["1 entry"]),
                      "ceph_ms_per_mib_3": statistics.median(ceph["3 entries"]),
                      "ceph_ms_per_mib_1": statistics.median(ceph["1 entry"]),
                      "rounds": rates}
    e = run["entries"]
    print(f"burst of {ranks} ranks x {args.shard_mib} MiB ({total_mib} MiB, {args.call_mib} MiB "
          f"per write call): 3 entries {e['mbps_3']:.1f} MB/s, 1 entry {e['mbps_1']:.1f} MB/s, "
          f"{e['ratio']:.2f}x (aim >= 0.9x)\n  Ganesha CPU per MiB per node: "
          f"{e['ganesha_ms_per_mib_3']:.1f} ms (3 entries), {e['ganesha_ms_per_mib_1']:.1f} ms "
          f"(1 entry); Ceph daemons {e['ceph_ms_per_mib_3']:.1f} / {e['ceph_ms_per_mib_1']:.1f} "
          "ms per MiB", flush=True)


def single_node_part(tmp, fs_path, cluster, rados_pool, args, run) -> None:
    """Ganesha FSAL_VFS on a directory pool, and the S3 gateway on the Ceph pool's file
    system (through ceph-fuse), on the directory pool and with its buckets in the Ceph
    pool's RADOS pool (``"store": {"kind": "rados"}``, the layout every node can serve):
    server CPU per MiB of the same burst."""
    from tests.kit import Gateway
    import boto3

    size, ranks, total_mib = args.shard_mib * MiB, args.ranks, args.ranks * args.shard_mib
    local = DirectoryDriver(tmp / "directory")
    local.create_pool("lb")
    lfs = local.create_filesystem("lb", "b").path
    vfs = NfsServer(NfsSettings(state_dir=str(tmp / "nfs-vfs"), port=free_port(),
                                bind_address=ENTRIES[0]))
    vfs.start([NfsExport(1, lfs, "/bench", [NfsClientRule("127.0.0.0/8", "rw",
                                                          "no_root_squash")])])
    s3dirs = {"S3 on Ceph": os.path.join(fs_path, "s3"), "S3 on directory": os.path.join(lfs, "s3"),
              "S3 on RADOS": str(tmp / "s3-rados-root")}
    stores = {"S3 on RADOS": {"store": {"kind": "rados", "ceph_conf": str(cluster.conf),
                                        "client": cluster.client,
                                        "keyring": str(cluster.keyring), "pool": rados_pool}}}
    gateways = {}
    try:
        for side, root in s3dirs.items():
            os.makedirs(root)
            work = tmp / side.replace(" ", "-")
            work.mkdir()
            gw = Gateway(work, {ACCESS: {"secret_key": SECRET, "user": "u", "admin": True}},
                         data_root=root, workers=2, **stores.get(side, {})).start(timeout=60)
            gateways[side] = gw
            boto3.client("s3", endpoint_url=gw.endpoint, aws_access_key_id=ACCESS,
                         aws_secret_access_key=SECRET, region_name="us-east-1"
                         ).create_bucket(Bucket="bench")
        fuse = ceph_fuse_pid(str(tmp))
        cpu = {s: [] for s in ("NFS VFS on directory", *s3dirs)}
        mbps = {s: [] for s in cpu}
        for i in range(args.repeat):
            took, used = run_ranks(_rank_nfs, lambda r: (ENTRIES[0], vfs.settings.port,
                                                         f"v{i}-{r}", size, args.call_mib * MiB),
                                   ranks, {"g": lambda: pid_cpu(vfs.pid)})
            cpu["NFS VFS on directory"].append(used["g"] * 1000 / total_mib)
            mbps["NFS VFS on directory"].append(total_mib * MiB / took / 1e6)
            for side, gw in gateways.items():
                meters = {"gw": lambda gw=gw: process_tree_cpu([gw.proc.pid])}
                if side == "S3 on Ceph" and fuse:
                    meters["fuse"] = lambda: pid_cpu(fuse)
                took, used = run_ranks(_rank_s3, lambda r, gw=gw: (gw.endpoint, f"s{i}-{r}", size),
                                       ranks, meters)
                cpu[side].append(sum(used.values()) * 1000 / total_mib)
                mbps[side].append(total_mib * MiB / took / 1e6)
            print(f"  round {i + 1}: " + ", ".join(f"{s} {cpu[s][-1]:.1f} ms/MiB "
                                                  f"({mbps[s][-1]:.0f} MB/s)" for s in cpu),
                  flush=True)
        run["single"] = {s: {"ms_per_mib": statistics.median(cpu[s]),
                             "mbps": statistics.median(mbps[s])} for s in cpu}
        print("server CPU per MiB written (median): " + "; ".join(
            f"{s} {v['ms_per_mib']:.1f} ms ({v['mbps']:.0f} MB/s)"
            for s, v in run["single"].items())
            + ("" if fuse else " (ceph-fuse's PID not found: the gateway's CPU only)"),
            flush=True)
    finally:
        for gw in gateways.values():
            gw.stop()
        vfs.stop()
        shutil.rmtree(lfs, ignore_errors=True)


def write_nfs(server, address, name, total, call) -> float:
    block = os.urandom(call)
    client = connect(address, server.settings.port)
    start = time.perf_counter()
    with client.open(name, "wb") as f:
        for _ in range(total // call):
            f.write(block)
    took = time.perf_counter() - start
    client.remove(name)
    return total / took / 1e6


def write_nfs_clients(server, address, name, total, clients) -> float:
    """``clients`` nfs-rs clients at once, each writing its share of ``total`` to a file of
    its own in 4 MiB calls; MB/s until the last is durable."""
    block, share = os.urandom(4 * MiB), total // clients
    conns = [connect(address, server.settings.port) for _ in range(clients)]
    errors = []

    def one(client, n):
        try:
            with client.open(f"{name}-{n}", "wb") as f:
                for _ in range(share // len(block)):
                    f.write(block)
        except Exception as exc:  # noqa: BLE001 - raised below
            errors.append(exc)
    threads = [threading.Thread(target=one, args=(c, n)) for n, c in enumerate(conns)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    if errors:
        raise errors[0]
    for n, c in enumerate(conns):
        c.remove(f"{name}-{n}")
    return total / took / 1e6


def write_fuse(directory, name, total) -> float:
    block = os.urandom(4 * MiB)
    path = os.path.join(directory, name)
    start = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(total // len(block)):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    took = time.perf_counter() - start
    os.unlink(path)
    return total / took / 1e6


def creates_nfs(server, address, sub, count) -> float:
    client = connect(address, server.settings.port)
    client.mkdir(sub)
    start = time.perf_counter()
    for i in range(count):
        with client.open(f"{sub}/f{i}", "wb") as f:
            f.write(b"x")
    return count / (time.perf_counter() - start)


def creates_fuse(directory, sub, count, fsync=False) -> float:
    """Files of one byte made through ceph-fuse; with ``fsync``, each fsynced before its
    close, as durable as an nfs-rs ``write()`` (which COMMITs before it returns)."""
    base = os.path.join(directory, sub)
    os.mkdir(base)
    start = time.perf_counter()
    for i in range(count):
        with open(os.path.join(base, f"f{i}"), "wb") as f:
            f.write(b"x")
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    return count / (time.perf_counter() - start)


def frontend_part(server, fs_path, files, tmp, args, run) -> None:
    total = args.write_mib * MiB
    small, big = f"NFS {4} MiB calls", f"NFS {args.big_call_mib} MiB calls"
    sides = {small: lambda i: write_nfs(server, ENTRIES[0], f"w{i}", total, 4 * MiB),
             big: lambda i: write_nfs(server, ENTRIES[0], f"W{i}", total,
                                      args.big_call_mib * MiB),
             "NFS 2 clients": lambda i: write_nfs_clients(server, ENTRIES[0], f"C{i}", total, 2),
             "ceph-fuse": lambda i: write_fuse(fs_path, f"F{i}", total)}
    fuse = ceph_fuse_pid(str(tmp))
    meters = {"ganesha": lambda: pid_cpu(server.pid), "fuse": lambda: pid_cpu(fuse) if fuse else 0}
    writes = {s: [] for s in sides}
    cpu = {s: [] for s in sides}
    for i in range(args.repeat):
        for side in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            before = {n: f() for n, f in meters.items()}
            writes[side].append(sides[side](i))
            used = {n: f() - before[n] for n, f in meters.items()}
            cpu[side].append((used["fuse"] if side == "ceph-fuse" else used["ganesha"])
                             * 1000 / args.write_mib)
        print(f"  round {i + 1}: " + ", ".join(f"{s} {writes[s][-1]:.1f} MB/s" for s in sides),
              flush=True)
    kinds = ["NFS", "ceph-fuse", "ceph-fuse fsync"]
    creates = {k: [] for k in kinds}
    per_create = {k: [] for k in kinds}
    for i in range(args.repeat):
        for side in (kinds if i % 2 == 0 else kinds[::-1]):
            mds0 = sum(requests_by_rank(files).values())
            before = {n: f() for n, f in meters.items()}
            if side == "NFS":
                creates[side].append(creates_nfs(server, ENTRIES[0], f"n{i}", args.creates))
            else:
                creates[side].append(creates_fuse(fs_path, f"{side[-1]}{i}", args.creates,
                                                  fsync=side.endswith("fsync")))
            used = {n: f() - before[n] for n, f in meters.items()}
            mds = sum(requests_by_rank(files).values()) - mds0
            per_create[side].append((mds / args.creates,
                                     (used["ganesha"] if side == "NFS" else used["fuse"])
                                     * 1e6 / args.creates))
    m = {s: statistics.median(v) for s, v in writes.items()}
    c = {s: statistics.median(v) for s, v in creates.items()}
    run["frontend"] = {
        "write_mib": args.write_mib, "mbps": m,
        "cpu_ms_per_mib": {s: statistics.median(v) for s, v in cpu.items()},
        "ratio_4mib": m[small] / m["ceph-fuse"], "ratio_big": m[big] / m["ceph-fuse"],
        "ratio_2clients": m["NFS 2 clients"] / m["ceph-fuse"],
        "creates": c, "creates_ratio": c["NFS"] / c["ceph-fuse"],
        "mds_requests_per_create": {s: statistics.median(x[0] for x in v)
                                    for s, v in per_create.items()},
        "server_cpu_us_per_create": {s: statistics.median(x[1] for x in v)
                                     for s, v in per_create.items()}}
    f = run["frontend"]
    print(f"{args.write_mib} MiB write (median): " + ", ".join(
        f"{s} {v:.1f} MB/s ({f['cpu_ms_per_mib'][s]:.1f} ms CPU/MiB)" for s, v in m.items())
        + f"\n  NFS/ceph-fuse: {f['ratio_4mib']:.2f}x with 4 MiB calls, {f['ratio_big']:.2f}x "
        f"with {args.big_call_mib} MiB calls, {f['ratio_2clients']:.2f}x with 2 clients "
        "(aim >= 0.8x)")
    print(f"{args.creates} creates (median): NFS {c['NFS']:.0f}/s, ceph-fuse "
          f"{c['ceph-fuse']:.0f}/s, {f['creates_ratio']:.2f}x; ceph-fuse with an fsync per "
          f"file {c['ceph-fuse fsync']:.0f}/s, NFS/that "
          f"{c['NFS'] / c['ceph-fuse fsync']:.2f}x; MDS requests per create "
          + ", ".join(f"{s} {v:.1f}" for s, v in f["mds_requests_per_create"].items())
          + "; server CPU per create " + ", ".join(
              f"{s} {v:.0f} us" for s, v in f["server_cpu_us_per_create"].items()), flush=True)


def table() -> None:
    rows = []
    for r in results.runs("cluster_entries"):
        e, f, s = r.get("entries", {}), r.get("frontend", {}), r.get("single", {})
        rows.append([
            r["time"][:16], r["commit"], f"{r.get('load', 0):.1f}",
            f"{e.get('mbps_3', 0):.1f} / {e.get('mbps_1', 0):.1f} = {e.get('ratio', 0):.2f}x",
            f"{e.get('ganesha_ms_per_mib_3', 0):.1f} / {e.get('ganesha_ms_per_mib_1', 0):.1f}",
            f"{e.get('ceph_ms_per_mib_3', 0):.0f}",
            " / ".join(f"{s[k]['ms_per_mib']:.1f}" if k in s else "-" for k in (
                "NFS VFS on directory", "S3 on Ceph", "S3 on directory", "S3 on RADOS")),
            f"{f.get('ratio_4mib', 0):.2f}x / {f.get('ratio_big', 0):.2f}x / "
            + (f"{f['ratio_2clients']:.2f}x" if "ratio_2clients" in f else "-"),
            " / ".join(f"{v:.0f}" for v in f.get("creates", {}).values())])
    results.write_table(
        "cluster_entries", "Every node an entry: 3 Ganesha entries vs 1, CPU per MiB, NFS vs ceph-fuse",
        ["time (UTC)", "commit", "load", "burst MB/s 3 entries / 1 entry", "Ganesha ms CPU/MiB "
         "per node (3 / 1)", "Ceph daemons ms/MiB", "ms CPU/MiB: NFS VFS dir / S3 CephFS (gateway + ceph-fuse) / S3 dir / S3 RADOS",
         "1 GiB NFS/ceph-fuse (4 MiB calls / 32 MiB calls / 2 clients)",
         "creates/s NFS / ceph-fuse (/ ceph-fuse, fsync per file)"], rows,
        notes="`bench/cluster_entries.py --record`; medians of each run's rounds. Ceph: the "
              "development cluster (replicated:3 over 3 CRUSH hosts on one 2-core machine).")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=6)
    ap.add_argument("--shard-mib", type=int, default=32)
    ap.add_argument("--call-mib", type=int, default=16, help="bytes per nfs-rs write() call")
    ap.add_argument("--write-mib", type=int, default=1024)
    ap.add_argument("--big-call-mib", type=int, default=32)
    ap.add_argument("--creates", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("entries", "single", "frontend"))
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()

    from dataplane.ceph.driver import CephDriver   # loads librados

    tmp = Path(tempfile.mkdtemp(prefix="strata-test-bench-entries-"))
    cluster = drv = None
    servers = []
    run = {"args": vars(args)}
    try:
        cluster = DevCluster(tmp / "cluster").up()
        drv = CephDriver(tmp / "state", ceph_conf=str(cluster.conf), client=cluster.client,
                         pool_prefix=f"entries{int(time.time())}.")
        drv.create_pool("bench", [], redundancy="replicated:3", failure_domain="host")
        fs = drv.create_filesystem("bench", "b")
        files = drv._files(drv._load("bench"))
        source = drv.filesystem_source("bench", "b")
        rados_pool = drv.rados_pool("bench")
        export = NfsExport(1, fs.path, "/bench",
                           [NfsClientRule("127.0.0.0/8", "rw", "no_root_squash")],
                           ceph=CephExportSource(**source))
        for n, address in enumerate(ENTRIES):
            member = NfsCluster(conf=str(cluster.conf), client=cluster.client, pool=rados_pool,
                                namespace="strata-nfs-grace", nodeid=f"node{n + 1}")
            server = NfsServer(NfsSettings(state_dir=str(tmp / f"nfs{n + 1}"), port=free_port(),
                                           bind_address=address, cluster=member,
                                           grace_seconds=GRACE, lease_seconds=GRACE))
            server.start([export], timeout=60)
            servers.append(server)
        grace = GraceDb(servers[0].settings.cluster)
        deadline = time.monotonic() + 120
        while grace.dump().in_grace:
            if time.monotonic() > deadline:
                raise SystemExit("the three servers' first grace did not end")
            time.sleep(1)
        print(f"3 Ganesha entries (FSAL_CEPH, rados_cluster) on {', '.join(ENTRIES)}; "
              f"{os.cpu_count()} CPUs", flush=True)
        if args.only in (None, "entries"):
            entries_part(servers, cluster, args, run)
        if args.only in (None, "frontend"):
            frontend_part(servers[0], fs.path, files, tmp, args, run)
        if args.only in (None, "single"):
            single_node_part(tmp, fs.path, cluster, rados_pool, args, run)
        run["load"] = os.getloadavg()[0]
        print(f"(load average {run['load']:.1f} at the end)")
        if args.record:
            results.record("cluster_entries", run)
            table()
    finally:
        for server in servers:
            try:
                server.stop()
            except Exception as exc:  # noqa: BLE001
                print(f"cleanup: {exc}", file=sys.stderr)
        if drv is not None:     # the pool's ceph-fuse goes before the cluster it talks to
            fuse = ceph_fuse_pid(str(tmp))
            try:
                drv.deactivate_pool("bench")
            except Exception as exc:  # noqa: BLE001
                print(f"cleanup: {exc}", file=sys.stderr)
            end_pid(fuse)
        if cluster is not None:
            cluster.destroy()
        for mountpoint in (tmp / "state" / "pools").glob("*"):   # guarded (chattr +i)
            subprocess.run(["chattr", "-i", str(mountpoint)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
