#!/usr/bin/env python3
"""Checkpoint burst benchmark (the scenario Strata exists for) on a real appliance.

One `strata up` (tests/appliance.py, destroyed at the end even on failure), then:

- burst: J jobs x R ranks (threads) each write one shard of S MiB at the same moment
  (write + fsync) into their version's directory through the file path, and each job's
  rank 0 commits it through the catalog; meanwhile one reader process streams training
  samples (1 MiB reads, page cache dropped after each file) from another file system.
  Figures: aggregate save throughput / raw disk write of the same bytes by the same
  number of threads with fsync to plain files on the same disk; reader throughput during
  the burst / reader alone.
- S3: the same burst through the SDK's PyTorch DCP S3 writer (when credentials.json has
  `s3_endpoint`): J concurrent `dcp.save`s of jobs that have a bucket, each one tensor of
  S MiB a rank in R upload streams (multipart parts from a thread pool), each ending with
  the catalog's verified commit (`location: s3`); compared with the same bytes as plain
  boto3 PUTs, one a shard.
- commit latency of a 1,000-shard manifest (sizes only, and with sha256 of every shard);
- restore: hot (lease, read every shard back, release); cold without pre-warm (read from
  the capacity copy); restore that starts on a cold version (lease -> pre-warm job ->
  read); restore after an ahead-of-time pre-warm. Versions are made cold the way the
  tier-down does: copy to a file system on a `capacity` pool (made through the
  API), then `prewarm.mark_cold()` (run in the appliance's Django environment).
- save throughput at 1, 8 (and with --full, 64) concurrent jobs of R ranks.
- reads during bursts (bench/burst_shares.py; alone with --shares-only): J x R ranks save
  through NFS and through S3 while a reader streams samples from another file system or
  bucket, with the classes of work's shares off, on and at a diagnostic maximum; reader
  during / alone and burst with the reader / alone, recorded in
  bench/results/checkpoint_burst_shares.{jsonl,md}. `--layouts` adds NFS layouts of the
  samples (their own pool, a second Ganesha in the samples group, both: burst_shares.py);
  `--modes` picks of off, on and max.
- `--ceph` (implies --shares-only): the burst on a Ceph pool. A development Ceph cluster
  (dataplane/ceph/devcluster.py: 3 OSDs on file-backed BlueStore, 2 MDS) beside the
  appliance; a ceph pool `ceph` (replicated:3 over its hosts) holds the checkpoints' file
  system (the NFS burst, through Ganesha's FSAL_CEPH) and the S3 gateway's data (`strata up
  --s3-pool ceph`, as bench/soak.py --ceph does). Where the samples are: NFS, on the local
  `default` pool (a data set read hot is kept on the fast local pool, the checkpoints on the
  shared cluster); S3, on the Ceph pool too, as one gateway keeps all its buckets on one
  pool. The burst's files are deleted through NFS after each burst and the bench waits,
  outside the measured windows, until Ceph has freed their space (CephSpace).

Each figure is the median of --repeat rounds. Run as root:

    .venv/bin/python bench/checkpoint_burst.py [--quick] [--full] [--jobs 8] [--ranks 4]
                                               [--shard-mib 16] [--repeat 3] [--shares-only]
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import requests

from bench import burst_shares
from bench.soak import wait_s3
from services.checkpoints.sdk import CheckpointClient
from tests.appliance import Appliance, embedded_env

MiB = 1 << 20
READ_BLOCK = 1 * MiB
CEPH_POOL = "ceph"       # --ceph: the pool of the checkpoints' file system and of S3's data


# -- helpers ---------------------------------------------------------------------------------

def drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def read_tree(path: str) -> int:
    """Read every file under `path` (cache dropped first); return the bytes read."""
    files = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for f in files:
        drop_cache(f)
    total = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while block := fh.read(4 * MiB):
                total += len(block)
    return total


def reader_loop(directory: str, counter, stop) -> None:
    """Stream training samples: read every file in 1 MiB calls, forever, cache dropped."""
    files = sorted(os.path.join(directory, f) for f in os.listdir(directory))
    while not stop.is_set():
        for f in files:
            if stop.is_set():
                return
            with open(f, "rb", buffering=0) as fh:
                while block := fh.read(READ_BLOCK):
                    with counter.get_lock():
                        counter.value += len(block)
            drop_cache(f)


class Api:
    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/") + "/api/v1/"
        self.s = requests.Session()
        self.s.headers["Authorization"] = f"Token {token}"

    def post(self, path: str, body=None, ok=(200, 201, 202)) -> dict:
        r = self.s.post(self.url + path, json=body, timeout=120)
        if r.status_code not in ok:
            raise RuntimeError(f"POST {path}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else {}

    def patch(self, path: str, body: dict) -> dict:
        r = self.s.patch(self.url + path, json=body, timeout=120)
        if r.status_code != 200:
            raise RuntimeError(f"PATCH {path}: {r.status_code} {r.text[:500]}")
        return r.json()

    def get(self, path: str) -> dict:
        r = self.s.get(path if path.startswith("http") else self.url + path, timeout=60)
        r.raise_for_status()
        return r.json()


def fmt_rate(bps: float) -> str:
    return f"{bps / MiB:8.1f} MiB/s"


def med(xs):
    return statistics.median(xs) if xs else float("nan")


# -- phases ----------------------------------------------------------------------------------

def raw_write(directory: str, writers: int, size: int, block: bytes) -> float:
    """`writers` threads each write `size` bytes to its own plain file and fsync it."""
    os.makedirs(directory, exist_ok=True)
    barrier = threading.Barrier(writers + 1)

    def one(i):
        path = os.path.join(directory, f"raw{i}.bin")
        barrier.wait()
        with open(path, "wb", buffering=0) as f:
            f.write(block[:size])
            os.fsync(f.fileno())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    shutil.rmtree(directory)
    return writers * size / elapsed


def file_burst(clients: tuple, jobs: list, ranks: int, step: int, block: bytes,
               reader: Reader | None = None) -> dict:
    """Every rank of every job writes its shard at the same moment; rank 0 commits."""
    size = len(block)
    first = CheckpointClient(*clients)
    versions = {j: first.begin(j, step) for j in jobs}  # every rank joins these
    start = threading.Barrier(len(jobs) * ranks + 1)
    job_done = {j: threading.Barrier(ranks) for j in jobs}
    ends, written, commits, errors = [], [], [], []

    def rank(job, r, client):
        try:
            v = client.begin(job, step)
            path = os.path.join(v.path, f"rank{r}.distcp")
            start.wait()
            with open(path, "wb", buffering=0) as f:
                f.write(block)
                os.fsync(f.fileno())
            written.append(time.perf_counter())
            job_done[job].wait()
            if r == 0:
                c0 = time.perf_counter()
                client.commit(v, [{"name": f"rank{i}.distcp", "size": size}
                                  for i in range(ranks)])
                commits.append(time.perf_counter() - c0)
                ends.append(time.perf_counter())
        except Exception as exc:  # noqa: BLE001 - reported after the burst
            errors.append(f"{job} rank {r}: {exc!r}")
            start.abort()

    threads = []
    for j in jobs:
        for r in range(ranks):
            t = threading.Thread(target=rank, args=(j, r, CheckpointClient(*clients)))
            threads.append(t)
            t.start()
    start.wait()
    t0 = time.perf_counter()
    s0 = reader.sample() if reader else None
    for t in threads:
        t.join()
    s1 = reader.sample() if reader else None
    if errors:
        raise RuntimeError("burst failed: " + "; ".join(errors[:5]))
    elapsed = max(ends) - t0
    out = {"throughput": len(jobs) * ranks * size / elapsed, "seconds": elapsed,
           "write_only": len(jobs) * ranks * size / (max(written) - t0),
           "commit_s": med(commits), "versions": versions}
    if reader:
        out["reader"] = (s1[1] - s0[1]) / (s1[0] - s0[0])
    return out


def s3_put_burst(creds: dict, prefixes: list, ranks: int, block: bytes) -> float:
    """Baseline: the same bytes as one boto3 PUT per shard, every shard at the same moment."""
    import boto3
    from botocore.config import Config

    def s3():
        return boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                            aws_access_key_id=creds["s3_access_key"],
                            aws_secret_access_key=creds["s3_secret_key"],
                            region_name=creds.get("s3_region", "us-east-1"),
                            config=Config(s3={"addressing_style": "path"},
                                          signature_version="s3v4", max_pool_connections=4))

    clients = [s3() for _ in range(len(prefixes) * ranks)]
    start = threading.Barrier(len(clients) + 1)
    errors = []

    def put(prefix, r, c):
        bucket, key = prefix[5:].split("/", 1)
        start.wait()
        try:
            c.put_object(Bucket=bucket, Key=f"{key}rank{r}.distcp", Body=block)
        except Exception as exc:  # noqa: BLE001 - reported after the burst
            errors.append(f"{prefix} rank {r}: {exc!r}")

    threads = [threading.Thread(target=put, args=(p, r, clients[i * ranks + r]))
               for i, p in enumerate(prefixes) for r in range(ranks)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError("S3 PUT burst failed: " + "; ".join(errors[:5]))
    c = clients[0]
    for p in prefixes:
        bucket, key = p[5:].split("/", 1)
        objs = c.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
        if objs:
            c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": o["Key"]} for o in objs]})
    return len(threads) * len(block) / elapsed


def s3_burst(creds: dict, jobs: list, ranks: int, step: int, block: bytes,
             part_mib: int = 8) -> dict:
    """Every job saves at the same moment through the SDK's DCP S3 writer: one tensor of S
    MiB per rank, `ranks` upload streams (thread_count), multipart parts of `part_mib` MiB
    from a thread pool; each save ends when the catalog has verified and committed it."""
    import torch
    import torch.distributed.checkpoint as dcp

    s3 = {"endpoint": creds["s3_endpoint"], "access_key": creds["s3_access_key"],
          "secret_key": creds["s3_secret_key"], "region": creds.get("s3_region", "us-east-1")}
    tensor = torch.frombuffer(bytearray(block), dtype=torch.uint8)
    clients = {j: CheckpointClient(creds["api_url"], creds["token"], s3=s3) for j in jobs}
    writers = {j: clients[j].dcp_writer(j, step, via="s3", thread_count=ranks,
                                        part_size=part_mib * MiB, max_concurrency=2 * ranks)
               for j in jobs}  # begun before the burst, as ranks do at start-up
    start = threading.Barrier(len(jobs) + 1)
    ends, errors, written = [], [], []

    def timed_finish(writer):  # when the shards are up and finish (.metadata, commit) begins
        real = writer.finish

        def finish(metadata, results):
            written.append(time.perf_counter())
            return real(metadata, results)
        writer.finish = finish

    for w in writers.values():
        timed_finish(w)

    def save(job):
        state = {f"rank{r}": tensor for r in range(ranks)}
        try:
            start.wait()
            dcp.save(state, storage_writer=writers[job])
            ends.append(time.perf_counter())
        except Exception as exc:  # noqa: BLE001 - reported after the burst
            errors.append(f"{job}: {exc!r}")

    threads = [threading.Thread(target=save, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("S3 burst failed: " + "; ".join(errors[:5]))
    elapsed = max(ends) - t0
    states = {writers[j].version.state for j in jobs}
    v0 = clients[jobs[0]].version(jobs[0], writers[jobs[0]].version.id)
    out = {"throughput": len(jobs) * ranks * len(block) / elapsed, "seconds": elapsed,
           "write_only": len(jobs) * ranks * len(block) / (max(written) - t0),
           "states": states, "objects": len(v0.raw["manifest"])}
    # free the space for the next round
    c = writers[jobs[0]].fs.s3
    for w in writers.values():
        bucket, key = w.version.s3_prefix[5:].split("/", 1)
        objs = c.list_objects_v2(Bucket=bucket, Prefix=key).get("Contents", [])
        if objs:
            c.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": o["Key"]} for o in objs]})
    for cl in clients.values():
        cl.close()
    return out


def commit_1k(client: CheckpointClient, job: str, step: int, sha256: bool) -> float:
    from services.checkpoints.sdk import manifest_of

    v = client.begin(job, step)
    data = os.urandom(4096)
    for i in range(1000):
        with open(os.path.join(v.path, f"shard{i:04d}.bin"), "wb") as f:
            f.write(data)
    manifest = manifest_of(v.path, sha256=sha256)
    t0 = time.perf_counter()
    client.commit(v, manifest)
    return time.perf_counter() - t0


DJANGO_MARK_COLD = """
import django, os, sys
django.setup()
from services.checkpoints import prewarm
from services.checkpoints.models import CheckpointVersion
prewarm.mark_cold(CheckpointVersion.objects.get(pk=int(sys.argv[1])), sys.argv[2])
"""


def mark_cold(app: Appliance, version_id: int, cold_path: str) -> None:
    env = {**embedded_env(), "STRATA_DATA_DIR": str(app.data_dir),
           "DJANGO_SETTINGS_MODULE": "console.settings"}
    r = subprocess.run([sys.executable, "-c", DJANGO_MARK_COLD, str(version_id), cold_path],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
                       check=False)
    if r.returncode:
        raise RuntimeError(f"mark_cold failed: {r.stderr[-2000:]}")


def timed_restore(client: CheckpointClient, job: str) -> float:
    t0 = time.perf_counter()
    with client.restore(job) as v:
        read_tree(v.path)
    return time.perf_counter() - t0


# -- main ------------------------------------------------------------------------------------

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--shard-mib", type=int, default=16)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--samples-mib", type=int, default=256, help="the reader's data set")
    p.add_argument("--reader-seconds", type=float, default=3.0, help="reader-alone window")
    p.add_argument("--quick", action="store_true",
                   help="one round, 8 MiB shards, a 128 MiB data set")
    p.add_argument("--full", action="store_true", help="also 64 concurrent jobs")
    p.add_argument("--shares-only", action="store_true",
                   help="only the reads-during-bursts phase (shares off and on)")
    p.add_argument("--ceph", action="store_true",
                   help="the burst on a Ceph pool of a development cluster (implies "
                        "--shares-only)")
    p.add_argument("--layouts", default="nfs,s3",
                   help="reads during bursts: the readers, of s3, " + ", ".join(
                       burst_shares.NFS_LAYOUTS) + " (comma-separated)")
    p.add_argument("--modes", default="off,on,max",
                   help="reads during bursts: the shares' modes, of off, on, max")
    p.add_argument("--ungrouped-clients", action="store_true",
                   help="reads during bursts: the clients' processes not in cpu groups of "
                        "their own (as runs 1 and 2; see bench/burst_shares.py)")
    a = p.parse_args(argv)
    if a.quick:
        a.repeat, a.shard_mib, a.samples_mib, a.reader_seconds = 1, 8, 128, 2.0
    a.layouts, a.modes = a.layouts.split(","), a.modes.split(",")
    bad = ([x for x in a.layouts if x not in ("s3",) + burst_shares.NFS_LAYOUTS]
           + [m for m in a.modes if m not in ("off", "on", "max")])
    if bad:
        p.error(f"unknown layout or mode: {', '.join(bad)}")
    a.shares_only = a.shares_only or a.ceph
    if os.geteuid() != 0:
        print("run as root: the appliance makes btrfs pools on loop devices", file=sys.stderr)
        return 2

    S = a.shard_mib * MiB
    counts = [1, 8] + ([64] if a.full else [])
    burst_bytes = a.jobs * a.ranks * S
    written = (a.repeat * (burst_bytes + sum(c * a.ranks * S for c in counts))
               + a.samples_mib * MiB + 64 * MiB)
    pool_gib = max(4, math.ceil(written * 1.5 / (1 << 30)))

    # the reads-during-bursts phase: modes x readers x 2 bursts a round, counted whole (the
    # gateway frees a deleted object's space only later)
    shares_bytes = (a.repeat * len(a.modes) * len(a.layouts) * 2 * burst_bytes
                    + 2 * a.samples_mib * MiB)
    pool_gib = max(pool_gib, math.ceil(shares_bytes * 1.3 / (1 << 30)))
    print(f"checkpoint burst: {a.jobs} jobs x {a.ranks} ranks x {a.shard_mib} MiB "
          f"({burst_bytes / MiB:.0f} MiB a burst), {a.repeat} round(s), default pool "
          f"{pool_gib} GiB", flush=True)
    ceph = None
    if a.ceph:
        from dataplane.ceph.devcluster import DevCluster
        # file-backed BlueStore never gives freed space back to the host's file system:
        # each OSD's file grows to what was ever written, up to its size (8 GiB: the live
        # data is the samples and one burst; BlueStore reuses what the deletes free)
        ceph = DevCluster(tempfile.mkdtemp(prefix="strata-bench-burst-ceph-"), osd_size=8 << 30)
    app = Appliance(pool_size=f"{pool_gib}G", extra_args=("--s3-pool", CEPH_POOL) if ceph else ())
    reader = None
    rows, notes = [], []
    t_start = time.perf_counter()
    try:
        if ceph:
            ceph.up(timeout=300)
            app.start(timeout=300)
            # the gateway's pool must exist when `strata up` starts to serve S3 from it
            Api(app.url, app.credentials["token"]).post("pools/", {
                "name": CEPH_POOL, "driver": "ceph", "ceph_conf": str(ceph.conf),
                "ceph_client": ceph.client, "redundancy": "replicated:3",
                "failure_domain": "host"})
            app.stop()
            app.start(timeout=300)
            wait_s3(app)
        else:
            app.start()
        creds = app.credentials
        api = Api(app.url, creds["token"])
        if a.shares_only:
            space = CephSpace(ceph, 3 * a.jobs * a.ranks * a.shard_mib * MiB) if ceph else None
            rows = shares_phase(app, api, creds, a, space)
            if space is not None:
                notes.append(f"ceph: waits for deleted bursts' space, median "
                             f"{med(space.waits):.1f} s, longest {max(space.waits):.1f} s")
            return 0        # the finally below destroys the appliance and prints the table
        client = CheckpointClient(app.url, creds["token"])
        block = os.urandom(S)

        api.post("filesystems/", {"name": "ckpt", "pool": "default"})
        samples = api.post("filesystems/", {"name": "samples", "pool": "default"})
        max_jobs = max([a.jobs] + counts)
        for i in range(max_jobs):
            api.post("checkpoint-jobs/", {"name": f"j{i}", "filesystem": "ckpt",
                                          "keep_last": 100})
        api.post("checkpoint-jobs/", {"name": "commit1k", "filesystem": "ckpt",
                                      "keep_last": 100})
        sample_dir = os.path.join(samples["path"], "train")
        os.makedirs(sample_dir)
        sample_block = os.urandom(4 * MiB)
        for i in range(a.samples_mib // 4):
            with open(os.path.join(sample_dir, f"sample{i:05d}.bin"), "wb") as f:
                f.write(sample_block)
        os.sync()
        clients = (app.url, creds["token"])  # each rank makes its own client

        # burst vs raw disk, reader alone vs during the burst ---------------------------
        reader = burst_shares.StreamReader(reader_loop, sample_dir)
        time.sleep(0.5)
        raw_dir = os.path.join(str(app.data_dir), "raw-bench")
        raws, bursts, solos, during, commit_s, wonly = [], [], [], [], [], []
        step = 0
        for rnd in range(a.repeat):
            solos.append(reader.rate_over(a.reader_seconds))
            raws.append(raw_write(raw_dir, a.jobs * a.ranks, S, block))
            step += 1
            b = file_burst(clients, [f"j{i}" for i in range(a.jobs)], a.ranks, step, block,
                           reader)
            bursts.append(b["throughput"])
            wonly.append(b["write_only"])
            during.append(b["reader"])
            commit_s.append(b["commit_s"])
            print(f"  round {rnd + 1}: raw {fmt_rate(raws[-1])}, burst {fmt_rate(bursts[-1])}"
                  f" ({b['seconds']:.2f} s), reader solo {fmt_rate(solos[-1])}, during "
                  f"{fmt_rate(during[-1])}", flush=True)
        reader.close()
        reader = None
        rows += [("raw disk write (same bytes, same threads, fsync)", fmt_rate(med(raws)), ""),
                 ("burst save, file path (write+fsync+commit)", fmt_rate(med(bursts)),
                  f"{med(bursts) / med(raws):.2f}x raw (aim >= 0.8)"),
                 ("  its write phase alone (until the last shard is fsynced)",
                  fmt_rate(med(wonly)), f"{med(wonly) / med(raws):.2f}x raw"),
                 ("  commit of one job's manifest during the burst",
                  f"{med(commit_s) * 1000:8.1f} ms", ""),
                 ("reader alone", fmt_rate(med(solos)), ""),
                 ("reader during the burst", fmt_rate(med(during)),
                  f"{med(during) / med(solos):.2f}x solo (aim >= 0.7)")]

        # S3 -----------------------------------------------------------------------------
        if creds.get("s3_endpoint"):
            api.post("buckets/", {"name": "ckpt-bench", "quota_bytes": 4 * burst_bytes})
            s3_jobs = [f"s3-j{i}" for i in range(a.jobs)]
            for j in s3_jobs:
                api.post("checkpoint-jobs/", {"name": j, "bucket": "ckpt-bench"})
            s3s, s3w, puts, s3_out = [], [], [], {}
            s3_burst(creds, s3_jobs[:1], 1, 0, block[:MiB])  # warm-up: DCP's first-call costs
            for rnd in range(a.repeat):
                puts.append(s3_put_burst(creds, [f"s3://ckpt-bench/put-baseline/{j}/"
                                                 for j in s3_jobs], a.ranks, block))
                s3_out = s3_burst(creds, s3_jobs, a.ranks, rnd + 1, block)
                s3s.append(s3_out["throughput"])
                s3w.append(s3_out["write_only"])
                print(f"  S3 round {rnd + 1}: PUTs {fmt_rate(puts[-1])}, DCP writer "
                      f"{fmt_rate(s3s[-1])} ({s3_out['seconds']:.2f} s)", flush=True)
            rows += [("burst, S3 PUTs (boto3, one PUT a shard, no commit)", fmt_rate(med(puts)),
                      f"{med(puts) / med(raws):.2f}x raw"),
                     ("burst save, S3 (SDK DCP writer, multipart, commit)",
                      fmt_rate(med(s3s)), f"{med(s3s) / med(raws):.2f}x raw, "
                      f"{med(s3s) / med(puts):.2f}x plain PUTs"),
                     ("  its upload phase alone (until the last finish() starts)",
                      fmt_rate(med(s3w)), f"{med(s3w) / med(puts):.2f}x plain PUTs")]
            notes.append(f"S3 burst: versions {sorted(s3_out['states'])}, "
                         f"{s3_out['objects']} objects a version ({a.ranks} streams + .metadata)")
        else:
            notes.append("S3: credentials.json has no s3_endpoint; S3 burst not run")

        # commit latency of a 1,000-shard manifest ----------------------------------------
        plain, hashed = [], []
        for rnd in range(a.repeat):
            plain.append(commit_1k(client, "commit1k", 2 * rnd + 1, sha256=False))
            hashed.append(commit_1k(client, "commit1k", 2 * rnd + 2, sha256=True))
        rows += [("commit, 1,000-shard manifest (sizes)", f"{med(plain) * 1000:8.1f} ms", ""),
                 ("commit, 1,000-shard manifest (with sha256)",
                  f"{med(hashed) * 1000:8.1f} ms", "")]

        # restore: hot, cold direct, cold with pre-warm on demand, pre-warmed ahead -------
        api.post("pools/", {"name": "capacity", "driver": "local", "devices": ["image:1G"]})
        cap = api.post("filesystems/", {"name": "capacity", "pool": "capacity"})
        latest = client.latest("j0")
        size = sum(e["size"] for e in client.version("j0", latest.id).raw["manifest"])
        hot, hot_read, cold_direct, on_demand, ahead, warm_job = [], [], [], [], [], []
        for rnd in range(a.repeat):
            hot.append(timed_restore(client, "j0"))
            t0 = time.perf_counter()
            read_tree(latest.path)
            hot_read.append(time.perf_counter() - t0)
            cold = os.path.join(cap["path"], "j0", f"step-{latest.step}")
            shutil.rmtree(cold, ignore_errors=True)
            shutil.copytree(latest.path, cold)
            os.sync()
            mark_cold(app, latest.id, cold)
            t0 = time.perf_counter()
            read_tree(cold)
            cold_direct.append(time.perf_counter() - t0)
            on_demand.append(timed_restore(client, "j0"))  # lease -> pre-warm job -> read
            mark_cold(app, latest.id, cold)
            job = api.post(f"checkpoint-jobs/j0/versions/{latest.id}/prewarm/")
            done = client.wait_job(job["job"], poll=0.1)
            warm_job.append((datetime.fromisoformat(done["finished_at"])
                             - datetime.fromisoformat(done["created_at"])).total_seconds())
            ahead.append(timed_restore(client, "j0"))
        rows += [(f"restore hot ({size / MiB:.0f} MiB: lease, read, release)",
                  f"{med(hot) * 1000:8.1f} ms", ""),
                 ("  its read alone (no API calls)", f"{med(hot_read) * 1000:8.1f} ms", ""),
                 ("restore cold, no pre-warm (read the capacity copy)",
                  f"{med(cold_direct) * 1000:8.1f} ms",
                  f"{med(cold_direct) / med(hot_read):.2f}x the hot read"),
                 ("restore cold, pre-warm on lease (wait, then read)",
                  f"{med(on_demand) * 1000:8.1f} ms", f"{med(on_demand) / med(hot):.2f}x hot"),
                 ("  pre-warm job alone (queued to finished)", f"{med(warm_job) * 1000:8.1f} ms",
                  ""),
                 ("restore after pre-warm ahead of time",
                  f"{med(ahead) * 1000:8.1f} ms",
                  f"{med(ahead) / med(hot):.2f}x hot (aim <= 1.1)")]
        notes.append("pre-warm on lease: the SDK polls the plane job after 0.2 s, doubling to 2 s")

        # scaling ------------------------------------------------------------------------
        for n in counts:
            rates = []
            for rnd in range(a.repeat):
                step += 1
                rates.append(file_burst(clients, [f"j{i}" for i in range(n)], a.ranks, step,
                                        block)["throughput"])
            rows.append((f"save throughput, {n} concurrent job(s) x {a.ranks} ranks",
                         fmt_rate(med(rates)), f"{med(rates) / med(raws):.2f}x raw"))
        if not a.full:
            notes.append("64 concurrent jobs: run with --full")
        rows += shares_phase(app, api, creds, a)
    finally:
        if reader is not None:
            reader.close()
        try:
            app.destroy()
        finally:
            if ceph is not None:
                ceph.destroy()
        if a.shares_only:
            print_table(rows, notes, a.repeat, t_start)
    return print_table(rows, notes, a.repeat, t_start)


def shares_phase(app: Appliance, api: Api, creds: dict, a, ceph=None) -> list:
    """Reads during bursts, shares off and on (bench/burst_shares.py), recorded."""
    load = []
    clients = "ungrouped" if a.ungrouped_clients else "grouped"
    try:
        result = burst_shares.run(api, creds, app.nfs_port, a.jobs, a.ranks, a.shard_mib,
                                  a.repeat, a.samples_mib, a.reader_seconds,
                                  log=lambda line: (load.append(os.getloadavg()[0]),
                                                    print(line, flush=True)),
                                  clients=clients, protos=a.layouts, modes=a.modes,
                                  ckpt_pool=CEPH_POOL if a.ceph else "default",
                                  data_dir=app.data_dir,
                                  settle=ceph)
    except Exception:
        for name in ("s3.log", "ganesha.log"):   # the data directory goes with the appliance
            log = app.data_dir / "log" / name
            if log.exists():
                print(f"--- the end of {log}:\n" + "\n".join(log.read_text(errors="replace")
                                                           .splitlines()[-30:]), flush=True)
        raise
    burst_shares.record(result, {"jobs": a.jobs, "ranks": a.ranks, "shard_mib": a.shard_mib,
                                 "repeat": a.repeat, "samples_mib": a.samples_mib,
                                 "clients": clients,
                                 "ckpt_pool": CEPH_POOL if a.ceph else "default",
                                 "s3_pool": CEPH_POOL if a.ceph else "default",
                                 **({"ceph_settle_s": {"median": round(med(ceph.waits), 1),
                                                       "max": round(max(ceph.waits), 1)}}
                                    if ceph is not None and ceph.waits else {})},
                        statistics.median(load) if load else float("nan"))
    return burst_shares.rows(result)


class CephSpace:
    """--ceph: after a burst's files are deleted, wait until the cluster's raw use is back
    within ``slack`` of what it was before the rounds (CephFS purges deleted files in the
    background; without the wait the OSDs fill within a few rounds). Waits are logged."""

    def __init__(self, cluster, slack: int, timeout: float = 180):
        self.cluster, self.slack, self.timeout = cluster, slack, timeout
        self.base, self.waits = None, []

    def used(self) -> int:
        return int(self.cluster.command("df")["stats"]["total_used_raw_bytes"])

    def __call__(self) -> None:
        if self.base is None:
            self.base = self.used()
            return
        t0 = time.monotonic()
        while (used := self.used()) > self.base + self.slack:
            if time.monotonic() - t0 > self.timeout:
                print(f"  ceph: {(used - self.base) / MiB:.0f} MiB still used after "
                      f"{self.timeout:.0f} s; going on", flush=True)
                break
            time.sleep(1)
        self.waits.append(time.monotonic() - t0)


def print_table(rows: list, notes: list, repeat: int, t_start: float) -> int:
    print()
    print(f"{f'figure (median of {repeat})':58} {'value':>16}  ratio")
    print("-" * 100)
    for name, value, ratio in rows:
        print(f"{name:58} {value:>16}  {ratio}")
    print()
    for n in notes:
        print("note:", n)
    print(f"total time {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
