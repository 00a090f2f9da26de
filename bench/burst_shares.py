"""The checkpoint burst's reads-during-bursts phase (run by bench/checkpoint_burst.py): a
reader streams samples from one file system / bucket while J jobs x R ranks save shards into
another, through NFS (nfs-rs against the appliance's Ganesha) and through S3 (boto3 PUTs,
one a shard, against its gateway), with the classes of work's shares off (every class 100,
the checkpoint bucket in the samples class) and on (the defaults, the bucket tagged
checkpoints), and as a diagnostic "max" (samples 10000, checkpoints and background 1). Per
mode and protocol: reader during the burst / reader alone, and burst with the reader /
burst alone, each ratio taken within a round and the median of the rounds given; the modes
are interleaved round by round so that the machine's drift hits them alike. ``protos``
adds NFS layouts of the samples (:data:`NFS_LAYOUTS`: their own pool, a second Ganesha, both),
interleaved the same way; ``ckpt_pool`` puts the checkpoints' file system on another pool (a
ceph pool with ``checkpoint_burst.py --ceph``).

The NFS reader drops each file from the page cache (on the host's path of the file system)
after reading it, so it reads the disk as a training loader with a data set larger than
memory does; the S3 reader's objects stay cached (the gateway's files are its own).

The clients run on the appliance's 2 cores, where on a real platform they run on hosts of
their own. With ``clients="grouped"`` (the default since run 3) this is modelled plainly:
the reader's process is in a cgroup v1 ``cpu`` group standing for its host, and the bench's
process (the J x R burst ranks' threads) in another standing for the burst's hosts, each
with ``cpu.shares`` 1024, the weight of one process at the root: without them each
runnable rank thread weighs as much as the reader's whole process, and the 32 ranks' own
hashing and signing take the reader's CPU before the appliance does anything. The groups
are the same for shares off, on and max, so the comparison of the shares stays honest;
``"ungrouped"`` runs it as runs 1 and 2 did.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import threading
import time
from pathlib import Path

from bench import results as bench_results

MiB = 1 << 20
OFF = {"samples": 100, "checkpoints": 100, "background": 100}
ON = {"samples": 1000, "checkpoints": 400, "background": 50}
# a diagnostic: checkpoints held to one request per gateway worker, background to nothing
# much, to show how much of the reader's loss the appliance can take back at most
MAX = {"samples": 10000, "checkpoints": 1, "background": 1}
MODES = (("off", OFF, "samples"), ("on", ON, "checkpoints"), ("max", MAX, "checkpoints"))
CKPT, SAMPLES = "burst-ckpt", "burst-samples"    # file systems, exports and buckets
# NFS layouts tried for the reader (``protos``; "nfs" and "s3" are the bench's own):
#   nfs-pool     the samples' file system on a pool of its own (another loop device, so
#                another disk queue than the checkpoints'), the appliance's one Ganesha;
#   nfs-ganesha  the samples (default pool) served by a second Ganesha in the samples cpu
#                group, the appliance's Ganesha (serving the burst) moved to the checkpoints
#                group for the window: one Ganesha a class;
#   nfs-split    both.
PROTOS = ("nfs", "s3")
NFS_LAYOUTS = ("nfs", "nfs-pool", "nfs-ganesha", "nfs-split")
SAMPLES_POOL = "burst-samples"       # nfs-pool, nfs-split: the samples' own pool
OWN_POOL_FS = "burst-samples-own"     # ... and the file system on it
CLIENT_GROUPS = Path("/sys/fs/cgroup/cpu/strata-bench-clients")   # see the docstring


class ClientGroups:
    """The clients' stand-in hosts: ``<CLIENT_GROUPS>-reader`` and ``-burst``, two cpu groups
    at the root of the v1 hierarchy, 1024 shares each (``enabled`` False: nothing)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.paths = {n: CLIENT_GROUPS.with_name(f"{CLIENT_GROUPS.name}-{n}")
                      for n in ("reader", "burst")}
        if enabled:
            for path in self.paths.values():
                path.mkdir(exist_ok=True)
                (path / "cpu.shares").write_text("1024\n")

    def join(self, name: str, pid: int) -> None:
        if self.enabled:
            (self.paths[name] / "cgroup.procs").write_text(f"{pid}\n")

    def remove(self) -> None:
        """Back to the root, and the groups removed."""
        if not self.enabled:
            return
        root = CLIENT_GROUPS.parent / "cgroup.procs"
        for path in self.paths.values():
            for pid in (path / "cgroup.procs").read_text().split():
                try:
                    root.write_text(f"{pid}\n")
                except OSError:
                    pass        # gone meanwhile
            try:
                path.rmdir()
            except OSError:
                pass


def _nfs(port: int, pseudo: str):
    """An nfs-rs client; a connect refused with NFS4ERR_COMPLETE_ALREADY (seen now and then
    when many clients of this process and its forked reader connect) is tried again."""
    import nfs_rs
    for attempt in range(5):
        try:
            return nfs_rs.Client.connect(f"nfs://127.0.0.1:{port}{pseudo}?version=4.1",
                                         connect_timeout=10, operation_timeout=120)
        except nfs_rs.NfsProtocolError as exc:
            if "reclaim complete already" not in str(exc) or attempt == 4:
                raise
            time.sleep(0.2)


def nfs_reader_loop(port, pseudo, names, local_dir, counter, stop) -> None:
    """Read every sample over NFS in max_read calls, forever; the cache dropped after each."""
    client = _nfs(port, pseudo)
    buf = bytearray(client.io_limits.max_read)
    while not stop.is_set():
        for name in names:
            if stop.is_set():
                return
            with client.open(f"train/{name}", "rb") as f:
                while n := f.readinto(buf):
                    with counter.get_lock():
                        counter.value += n
            fd = os.open(os.path.join(local_dir, name), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def s3_reader_loop(creds, bucket, keys, counter, stop) -> None:
    """GET every sample object in 1 MiB reads, forever."""
    s3 = s3_client(creds)
    while not stop.is_set():
        for key in keys:
            if stop.is_set():
                return
            body = s3.get_object(Bucket=bucket, Key=key)["Body"]
            while block := body.read(MiB):
                with counter.get_lock():
                    counter.value += len(block)


class StreamReader:
    """One reader process running ``target(*args, counter, stop)``, which adds the bytes it
    reads to ``counter``; ``rate_over`` is its rate over a few seconds."""

    def __init__(self, target, *args, groups: ClientGroups | None = None):
        self.counter, self.stop = mp.Value("q", 0), mp.Event()
        self.proc = mp.Process(target=target, args=(*args, self.counter, self.stop), daemon=True)
        self.proc.start()
        if groups is not None:
            groups.join("reader", self.proc.pid)
        deadline = time.monotonic() + 30
        while self.counter.value == 0 and time.monotonic() < deadline:   # connected, reading
            time.sleep(0.05)

    def sample(self) -> tuple:
        return time.perf_counter(), self.counter.value

    def rate_over(self, seconds: float) -> float:
        t0, b0 = self.sample()
        time.sleep(seconds)
        t1, b1 = self.sample()
        return (b1 - b0) / (t1 - t0)

    def close(self) -> None:
        self.stop.set()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def s3_client(creds):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                        aws_access_key_id=creds["s3_access_key"],
                        aws_secret_access_key=creds["s3_secret_key"],
                        region_name=creds.get("s3_region", "us-east-1"),
                        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                                      max_pool_connections=4, retries={"max_attempts": 10}))


def _burst(writers: list, reader: StreamReader | None) -> dict:
    """Run ``writers`` (callables, one a rank) at one moment; bytes/s, and the reader's rate
    over the same window."""
    start = threading.Barrier(len(writers) + 1)
    written, errors = [], []

    def run(write):
        start.wait()
        try:
            written.append(write())
        except Exception as exc:  # noqa: BLE001 - reported after the burst
            errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    s0 = reader.sample() if reader else None
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    s1 = reader.sample() if reader else None
    if errors:
        raise RuntimeError("burst failed: " + "; ".join(errors[:5]))
    out = {"rate": sum(written) / elapsed, "seconds": elapsed}
    if reader:
        out["reader"] = (s1[1] - s0[1]) / (s1[0] - s0[0])
    return out


def nfs_writers(port: int, jobs: int, ranks: int, step: int, block: bytes) -> list:
    def rank(name):
        def write():
            client = _nfs(port, f"/{CKPT}")
            with client.open(f"burst/{name}", "wb") as f:
                for off in range(0, len(block), 4 * MiB):
                    f.write(block[off:off + 4 * MiB])
            return len(block)
        return write
    return [rank(f"j{j}-s{step}-r{r}.distcp") for j in range(jobs) for r in range(ranks)]


def s3_writers(creds, jobs: int, ranks: int, step: int, block: bytes) -> list:
    clients = [s3_client(creds) for _ in range(jobs * ranks)]

    def rank(i, key):
        def write():
            clients[i].put_object(Bucket=CKPT, Key=key, Body=block)
            return len(block)
        return write
    return [rank(j * ranks + r, f"j{j}/step-{step}/rank{r}.distcp")
            for j in range(jobs) for r in range(ranks)]


def set_mode(api, shares: dict, bucket_class: str) -> None:
    for name, share in shares.items():
        api.patch(f"qos/classes/{name}/", {"share": share})
    api.patch(f"buckets/{CKPT}/", {"workload_class": bucket_class})
    time.sleep(1.5)      # the gateway re-reads its config at most every second


def prepare(api, creds, samples_mib: int, protos=PROTOS, ckpt_pool: str = "default") -> dict:
    """File systems, exports and buckets of the phase, and the samples in them. The
    checkpoints' file system is on ``ckpt_pool``, the samples' on ``default`` (and, for the
    nfs-pool layouts, also on a pool of their own); the buckets on the gateway's pool."""
    import nfs_rs  # noqa: F401 - fails here, before anything is made, when it is missing
    fss = [(CKPT, ckpt_pool), (SAMPLES, "default")]
    if {"nfs-pool", "nfs-split"} & set(protos):
        gib = max(1, -(-samples_mib * 2 // 1024))
        api.post("pools/", {"name": SAMPLES_POOL, "driver": "local", "devices": [f"image:{gib}G"]})
        fss.append((OWN_POOL_FS, SAMPLES_POOL))
    paths = {}
    for name, pool in fss:
        paths[name] = api.post("filesystems/", {"name": name, "pool": pool})["path"]
        api.post("nfs-exports/", {"filesystem": name, "pseudo": f"/{name}",
                                  "clients": ["127.0.0.1 rw no_root_squash"]})
    for name in (CKPT, SAMPLES):
        api.post("buckets/", {"name": name})
    ckpt_dir = os.path.join(paths[CKPT], "burst")
    os.makedirs(ckpt_dir, exist_ok=True)
    block = os.urandom(4 * MiB)
    names = [f"sample{i:05d}.bin" for i in range(samples_mib // 4)]
    for fs in paths:
        if fs == CKPT:
            continue
        os.makedirs(os.path.join(paths[fs], "train"), exist_ok=True)
        for name in names:
            with open(os.path.join(paths[fs], "train", name), "wb") as f:
                f.write(block)
    s3 = s3_client(creds)
    for i in range(samples_mib // 4):
        s3.put_object(Bucket=SAMPLES, Key=f"train/sample{i:05d}.bin", Body=block)
    os.sync()
    return {"paths": paths, "train": os.path.join(paths[SAMPLES], "train"), "names": names,
            "ckpt_dir": ckpt_dir,
            "keys": [f"train/sample{i:05d}.bin" for i in range(samples_mib // 4)]}


class SampleGanesha:
    """nfs-ganesha, nfs-split: a second Ganesha (the file service's own runtime, on a port
    of its own) serving the samples' file systems, in the appliance's samples cpu group; while
    a layout of it runs (:meth:`classes_apart`), the appliance's Ganesha, which serves the
    checkpoints, is in the checkpoints group."""

    def __init__(self, data_dir, paths: dict):
        import tempfile
        from plumbing.process import free_port
        from plumbing.workclass import ClassGroups
        from services.file.runtime import NfsExport, NfsServer, NfsSettings

        self.groups = ClassGroups(data_dir)
        self.main = next(p for p in self.groups.pids("samples")
                         if Path(f"/proc/{p}/comm").read_text().strip() == "ganesha.nfsd")
        self.state = tempfile.mkdtemp(prefix="strata-bench-ganesha-")
        self.port = free_port()
        self.server = NfsServer(NfsSettings(state_dir=self.state, port=self.port,
                                            bind_address="127.0.0.1"))
        rule = {"address": "127.0.0.1", "access": "rw", "squash": "no_root_squash"}
        self.server.start([NfsExport(export_id=i + 1, path=paths[fs], pseudo=f"/{fs}",
                                     clients=[rule], snapshots=False)
                           for i, fs in enumerate(f for f in paths if f != CKPT)])
        self._join("samples", self.server.pid)

    def _join(self, name: str, pid: int) -> None:
        (self.groups.group(name) / "cgroup.procs").write_text(f"{pid}\n")

    def classes_apart(self):
        """A context: the appliance's Ganesha in the checkpoints group meanwhile."""
        import contextlib

        @contextlib.contextmanager
        def apart():
            self._join("checkpoints", self.main)
            try:
                yield
            finally:
                self._join("samples", self.main)
        return apart()

    def close(self) -> None:
        self.server.stop()
        import shutil
        shutil.rmtree(self.state, ignore_errors=True)


def _clean(creds, where: dict, nfs_port: int) -> None:
    """Delete the burst's files and objects. The files through NFS, as the ranks' hosts
    would: on a Ceph pool, Ganesha's CephFS client holds the capabilities of what it wrote,
    and a file deleted through another client (the plane's mount) stays a stray the MDS
    cannot purge until Ganesha lets its cache entry go (measured: 64 strays, 512 MiB not
    freed after 3 minutes)."""
    client = _nfs(nfs_port, f"/{CKPT}")
    try:
        for name in client.listdir("burst"):
            client.remove(f"burst/{name}")
    finally:
        client.close()
    s3 = s3_client(creds)
    while objs := s3.list_objects_v2(Bucket=CKPT).get("Contents", []):
        s3.delete_objects(Bucket=CKPT, Delete={"Objects": [{"Key": o["Key"]} for o in objs]})


def run(api, creds, nfs_port: int, jobs: int, ranks: int, shard_mib: int, repeat: int,
        samples_mib: int, reader_seconds: float, log=print, clients: str = "grouped",
        protos=PROTOS, modes=("off", "on", "max"), ckpt_pool: str = "default",
        data_dir=None, settle=None) -> dict:
    """The phase; {mode: {protocol: {reader_solo, reader_during, burst_solo, burst_with_reader}}}
    (bytes/s, medians) and the ratios. ``clients``: "grouped" or "ungrouped" (the docstring);
    ``protos``: of "s3" and :data:`NFS_LAYOUTS` (the nfs-ganesha ones need ``data_dir``, the
    appliance's); ``ckpt_pool``: the pool of the checkpoints' file system; ``settle``, if
    given, is called once before the rounds and after each burst's files are deleted (outside
    the measured windows): a Ceph pool waits there for the space to be freed."""
    where = prepare(api, creds, samples_mib, protos, ckpt_pool)
    settle = settle or (lambda: None)
    settle()
    groups = ClientGroups(clients == "grouped")
    second = (SampleGanesha(data_dir, where["paths"])
              if {"nfs-ganesha", "nfs-split"} & set(protos) else None)
    try:
        groups.join("burst", os.getpid())  # after `strata up`: its daemons stay where they are
        return _rounds(api, creds, nfs_port, jobs, ranks, shard_mib, repeat, reader_seconds,
                       log, where, groups, protos, [m for m in MODES if m[0] in modes], second,
                       settle)
    finally:
        groups.remove()
        if second is not None:
            second.close()


def _reader(proto, creds, nfs_port, where, groups, second) -> StreamReader:
    if proto == "s3":
        return StreamReader(s3_reader_loop, creds, SAMPLES, where["keys"], groups=groups)
    fs = OWN_POOL_FS if proto in ("nfs-pool", "nfs-split") else SAMPLES
    port = second.port if proto in ("nfs-ganesha", "nfs-split") else nfs_port
    return StreamReader(nfs_reader_loop, port, f"/{fs}", where["names"],
                        os.path.join(where["paths"][fs], "train"), groups=groups)


def _rounds(api, creds, nfs_port, jobs, ranks, shard_mib, repeat, reader_seconds, log, where,
            groups, protos, modes, second, settle) -> dict:
    import contextlib
    block = os.urandom(shard_mib * MiB)
    figures = {m: {p: {k: [] for k in ("reader_solo", "reader_during", "burst_solo",
                                       "burst_with_reader")} for p in protos}
               for m, _, _ in modes}
    step = 0
    for rnd in range(repeat):
        for mode, shares, bucket_class in modes:
            set_mode(api, shares, bucket_class)
            for proto in protos:
                def writers(step):
                    return (s3_writers(creds, jobs, ranks, step, block) if proto == "s3"
                            else nfs_writers(nfs_port, jobs, ranks, step, block))
                apart = (second.classes_apart() if proto in ("nfs-ganesha", "nfs-split")
                         else contextlib.nullcontext())
                with apart:
                    step += 1
                    solo = _burst(writers(step), None)
                    _clean(creds, where, nfs_port)
                    settle()
                    reader = _reader(proto, creds, nfs_port, where, groups, second)
                    try:
                        alone = reader.rate_over(reader_seconds)
                        step += 1
                        both = _burst(writers(step), reader)
                    finally:
                        reader.close()
                    _clean(creds, where, nfs_port)
                    settle()
                f = figures[mode][proto]
                f["reader_solo"].append(alone)
                f["reader_during"].append(both["reader"])
                f["burst_solo"].append(solo["rate"])
                f["burst_with_reader"].append(both["rate"])
                log(f"  shares {mode:3} {proto:11} round {rnd + 1}: reader {alone / MiB:7.1f} -> "
                    f"{both['reader'] / MiB:7.1f} MiB/s ({both['reader'] / alone:.2f}x), burst "
                    f"{solo['rate'] / MiB:7.1f} -> {both['rate'] / MiB:7.1f} MiB/s "
                    f"({both['rate'] / solo['rate']:.2f}x)")
    set_mode(api, ON, "checkpoints")
    medians = {m: {p: {k: statistics.median(v) for k, v in f.items()} for p, f in per.items()}
               for m, per in figures.items()}
    def median_ratio(f, num, den):
        return round(statistics.median(n / d for n, d in zip(f[num], f[den])), 2)
    ratios = {m: {p: {"reader": median_ratio(f, "reader_during", "reader_solo"),
                      "burst": median_ratio(f, "burst_with_reader", "burst_solo")}
                  for p, f in per.items()} for m, per in figures.items()}
    return {"medians": medians, "ratios": ratios, "rounds": figures}


def rows(result: dict) -> list:
    """Rows of the bench's table."""
    out = []
    for mode, per in result["medians"].items():
        for proto in per:
            m, r = per[proto], result["ratios"][mode][proto]
            out += [(f"shares {mode}, {proto.upper()}: reader during burst / alone",
                     f"{m['reader_during'] / MiB:8.1f} MiB/s",
                     f"{r['reader']:.2f}x of {m['reader_solo'] / MiB:.1f} MiB/s (aim >= 0.7)"),
                    (f"shares {mode}, {proto.upper()}: burst with reader / alone",
                     f"{m['burst_with_reader'] / MiB:8.1f} MiB/s",
                     f"{r['burst']:.2f}x of {m['burst_solo'] / MiB:.1f} MiB/s (aim >= 0.8)")]
    return out


def record(result: dict, args: dict, load: float) -> None:
    """bench/results/checkpoint_burst_shares.jsonl and .md (a row per run)."""
    bench_results.record("checkpoint_burst_shares", {**args, "load_median": round(load, 2),
                                                     "ratios": result["ratios"],
                                                     "ratio_of": "rounds",
                                                     "medians": result["medians"]})
    write_table()


LAYOUT = {"nfs": "NFS: samples on default, the one Ganesha",
          "nfs-pool": "NFS: samples on a pool of their own, the one Ganesha",
          "nfs-ganesha": "NFS: samples on default, a 2nd Ganesha (samples group)",
          "nfs-split": "NFS: samples on a pool of their own, a 2nd Ganesha",
          "s3": "S3: both buckets on the gateway's pool"}


def write_table() -> None:
    """bench/results/checkpoint_burst_shares.md from every run recorded: a row per run and
    reader layout."""
    table = []
    for number, run_ in enumerate(bench_results.runs("checkpoint_burst_shares"), 1):
        protos = sorted({p for per in run_["ratios"].values() for p in per},
                        key=lambda p: (p == "s3", NFS_LAYOUTS.index(p) if p in NFS_LAYOUTS else 0))
        for proto in protos:
            where = LAYOUT.get(proto, proto)
            if proto == "s3":
                where += f" ({run_.get('s3_pool', 'default')})"
            cells = [str(number), run_["time"][:16],
                     f"{run_['jobs']}x{run_['ranks']}x{run_['shard_mib']} MiB",
                     str(run_["repeat"]), run_.get("clients", "ungrouped"),
                     run_.get("ckpt_pool", "default"), where]
            for mode, _, _ in MODES:
                r = run_["ratios"].get(mode, {}).get(proto)
                cells.append(f"{r['reader']:.2f} / {r['burst']:.2f}" if r else "-")
            cells.append(str(run_.get("load_median", "-")))
            table.append(cells)
    bench_results.write_table(
        "checkpoint_burst_shares",
        "bench/checkpoint_burst.py: reads during bursts, with and without the shares",
        ["run", "time", "burst", "rounds", "clients", "checkpoints' pool", "the reader",
         "shares off", "shares on", "max", "load median"], table,
        notes="Each cell: reader during the burst / reader alone, then burst with the reader / "
              "burst alone. Aims: reader >= 0.7, burst >= 0.8. Shares off: every class 100 and "
              "the checkpoint bucket in the samples class; on: samples 1000, checkpoints 400, "
              "background 50, the bucket tagged checkpoints; max (a diagnostic): samples 10000, "
              "checkpoints and background 1. Run 1 gives the ratio of the medians of its rounds; "
              "later runs the median of each round's ratio. The load median is the host's "
              "1-minute load average (2 cores, shared with other work) during the run. Clients "
              "grouped: the reader's process and the burst's ranks each in a cpu group of "
              "1024 shares standing for their own hosts (bench/burst_shares.py); ungrouped: "
              "every client thread at the root like any process. The checkpoints' pool holds "
              "the NFS burst's file system; the S3 gateway keeps every bucket on one pool (in "
              "brackets: `default`, or `ceph` with `--ceph`). The NFS layouts: "
              "bench/burst_shares.py. What the reader waits for: services/qos/README.md, "
              "'Measured'.")
