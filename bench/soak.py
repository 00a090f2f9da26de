"""The soak: a whole appliance (`strata up`, real daemons) under mixed load for a set time,
with faults on a timer, and nothing acknowledged may be lost.

Load (bench/soak_load.py, one client thread each): S3 PUT/GET/multipart/list (boto3), NFS
writes and sample reads (nfs-rs), SMB writes (smbprotocol), block writes over NBD and iSCSI
(qemu-io), checkpoint bursts of 4 ranks with commits and restores (the checkpoint SDK),
vector upserts and searches, a snapshot schedule, a backup to S3 and a tier move (REST).
Faults (bench/soak_faults.py), one at a time, spread over the run: kill -9 of tgtd,
qemu-storage-daemon, Ganesha, smbd, the S3 gateway, Redis, the web server and the Celery
worker (each started again by `strata up`), and the small pool filled for a while then
freed. After each fault and at the end, everything acknowledged is read back.

`--ceph`: a development Ceph cluster (3 OSDs, 2 MDS) is started beside the appliance; the
checkpoint file system (the burst, its snapshot schedule) and the S3 gateway's data
(`strata up --s3-pool ceph`) are on a ceph pool, and two more faults join the round: an OSD
killed with SIGKILL and started again 20 s later, and an MDS failover (`ceph mds fail` of
the active MDS; the standby takes rank 0). Ceph's daemons' memory is reported, not judged
(their caches grow to their targets by design).

Exit 1 on an unexpected error, a read-back mismatch, a leak, a scheduled fault that did not
happen, or a class without operations. The leak rule: every daemon's PSS (with its
children's) is sampled every SAMPLE_S through the run (a third of that under 10 minutes), just
before each kill of it and at the end. Each life of a daemon (a kill starts another) is judged
on its samples from the middle of that life on, none in the run's warm-up: the least-squares
line through them may rise by LEAK_ALLOWANCE_MIB + LEAK_MIB_PER_HOUR per hour of that span,
more is a leak. The first half of a life is its warm-up: a daemon grows as its code paths run
for the first time (the Celery worker's pool children import and connect on the first task of
each kind and on the recovery paths a fault sets off: in steps of 5-40 MiB, flat between),
while a leak grows through the second half too. A life with fewer than 3 samples there is not
judged. Descriptors: more than FD_ALLOWANCE above the figure after the warm-up, at the end or
just before a kill, is a leak. Usage (root):
`python bench/soak.py [--minutes 30] [--ceph] [--json out.json] [--record]`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import soak_load as load  # noqa: E402
from bench.soak_faults import (CEPH_FAULTS, KILLED, CephFaults, Daemons,  # noqa: E402
                               FaultWindows, growth, lives_of)
from tests.appliance import Appliance  # noqa: E402

LEAK_ALLOWANCE_MIB = 64     # a warmed-up daemon may still grow this much (caches, arenas)
LEAK_MIB_PER_HOUR = 64      # ... plus this per hour; more is a leak
SAMPLE_S = 15.0             # the daemons' memory is sampled this often through the run
FD_ALLOWANCE = 64           # descriptors a daemon may gain (clients' connections); more: a leak
PASSWORD = "Strata-soak-1"
CEPH_POOL = "ceph"          # --ceph: the pool of the checkpoint file system and of S3 data


class Plane:
    """The REST API of the appliance, as an operator's script calls it."""

    def __init__(self, creds: dict):
        self.url, self.token = creds["api_url"], creds["token"]

    def __call__(self, method: str, path: str, body=None, timeout: float = 30):
        req = urllib.request.Request(
            self.url + path, method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {self.token}",
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: {exc.code} {exc.read()[:300]!r}") from None

    def run_job(self, path: str, body=None, timeout: float = 180) -> dict:
        """POST to an endpoint that answers 202 with a Job; wait for it; raise unless it
        succeeded. An accepted job not finished after ``timeout`` seconds is an error (the
        jobs of the soak take seconds)."""
        job = self("POST", path, body or {})
        deadline = time.monotonic() + timeout
        while job["state"] not in ("succeeded", "failed", "cancelled"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job['id']} ({path}) accepted but still {job['state']} "
                                   f"after {timeout:.0f} s")
            time.sleep(0.5)
            job = self("GET", f"jobs/{job['id']}/")
        if job["state"] != "succeeded":
            raise RuntimeError(f"job {job['id']} ({path}) {job['state']}: "
                               f"{job.get('error') or job.get('message')}")
        return job


class Soak:
    def __init__(self, app: Appliance, minutes: float, keys: int,
                 ceph: CephFaults | None = None):
        self.app, self.seconds, self.ceph = app, minutes * 60, ceph
        self.windows = FaultWindows()
        self.stats = load.Stats(self.windows)
        self.daemons = Daemons(app.data_dir)
        self.keys = keys
        self.faults: list[dict] = []
        self.before_kills: dict[str, list] = {}   # daemon -> its usage just before each kill
        self.series: list = []   # [t, {daemon: usage}] through the run (the leak rule's)
        self.user = ""
        self.traffic: list[load.Traffic] = []

    # ------------------------------------------------------------------- what the load uses
    def provision(self) -> None:
        from services.file.tests.plane_support import new_user_name
        api, creds = Plane(self.app.credentials), self.app.credentials
        api("POST", "pools/", {"name": "small", "driver": "local", "devices": ["image:256M"],
                               "media": "capacity"})
        fs = {}
        for name, pool in (("files", "small"), ("filler", "small"), ("samples", "default"),
                           ("ckpt", CEPH_POOL if self.ceph else "default"),
                           ("tiered", "default")):
            fs[name] = api("POST", "filesystems/", {"name": name, "pool": pool, "mode": "0777"})
        if self.ceph:   # the plane made the CephFS with its first file system (the gateway's)
            self.ceph.one_active_mds()
        for name in ("files", "samples"):
            api("POST", "nfs-exports/", {"filesystem": name,
                                         "clients": ["127.0.0.1 rw no_root_squash"]})
        self.user = new_user_name()
        os.chmod(self.app.data_dir, 0o755)   # SMB users must reach the file systems
        api("POST", "smb-users/", {"username": self.user, "password": PASSWORD})
        api("POST", "filesystems/", {"name": "smbk", "owner": self.user, "mode": "0750"})
        api("POST", "smb-shares/", {"name": "smbk", "filesystem": "smbk",
                                    "valid_users": [self.user]})
        urls = {}
        for proto in ("nbd", "iscsi"):
            api("POST", "volumes/", {"name": f"{proto}-vol", "size_bytes": 16 << 20})
            c = api("POST", "block-exports/", {"volume": f"{proto}-vol", "protocol": proto,
                                               "allow_any": True})["connection"]
            urls[proto] = c["uri"] if proto == "nbd" else \
                f"iscsi://{c['portal']}/{c['target_iqn']}/{c['lun']}"
        api("POST", "snapshot-schedules/", {"name": "soak", "filesystem": "ckpt",
                                            "every_minutes": 1, "keep_last": 3})
        s3 = load.S3Traffic(self.stats, self.keys, creds)
        s3.setup()
        s3.s3.create_bucket(Bucket="soak-backups")
        api("POST", "backup-targets/", {"name": "self", "endpoint_url": creds["s3_endpoint"],
                                        "access_key": creds["s3_access_key"],
                                        "secret_key": creds["s3_secret_key"],
                                        "bucket": "soak-backups", "prefix": "soak"})
        api("POST", "backups/", {"name": "soak", "filesystem": "samples", "target": "self"})
        self.filler = Path(fs["filler"]["path"])
        self.traffic = [
            s3,
            load.NfsWrites(self.stats, self.keys, self.app.nfs_port, "/files"),
            load.SampleReads(self.stats, self.keys, self.app.nfs_port, "/samples",
                             Path(fs["samples"]["path"])),
            load.SmbWrites(self.stats, self.keys, self.app.smb_port, "smbk", self.user,
                           PASSWORD),
            load.BlockWrites(self.stats, self.keys, "nbd_write", urls["nbd"]),
            load.BlockWrites(self.stats, self.keys, "iscsi_write", urls["iscsi"]),
            load.CheckpointTraffic(self.stats, self.keys, self.app.data_dir / "credentials.json"),
            load.VectorTraffic(self.stats, self.keys, api),
            load.ProtectionTraffic(self.stats, self.keys, api, api.run_job,
                                   Path(fs["tiered"]["path"])),
        ]
        for t in self.traffic[1:]:
            t.setup()

    # ------------------------------------------------------------------- faults
    def schedule(self, warmup: float) -> list[tuple[float, str]]:
        """Every kind of fault once, evenly spread after the warm-up (again and again in a
        long run: a round of all kinds about every 15 minutes)."""
        kinds = [f"kill:{n}" for n in KILLED] + ["full_pool"] + \
            (list(CEPH_FAULTS) if self.ceph else [])
        rounds = max(1, round(self.seconds / 900))
        span = self.seconds - warmup - min(30.0, self.seconds * 0.05)
        step = span / (len(kinds) * rounds)
        return [(warmup + i * step, kinds[i % len(kinds)]) for i in range(len(kinds) * rounds)]

    def inject(self, kind: str, full_seconds: float) -> dict:
        t0 = time.monotonic()
        record = {"kind": kind, "at_s": round(t0 - self.t0, 1)}
        window = self.windows.open(kind)
        try:
            if kind == "full_pool":
                record["filled_mib"] = round(fill(self.filler) / 2**20)
                time.sleep(full_seconds)
                (self.filler / "filler").unlink()
                os.sync()
            elif kind == "ceph:osd":
                osd = self.ceph.next_osd
                before = self.note(self.ceph.sample()).get(f"ceph-osd.{osd}")
                if before:
                    self.before_kills.setdefault(f"ceph-osd.{osd}", []).append(before)
                record.update(self.ceph.kill_osd())
            elif kind == "ceph:mds_failover":
                record.update(self.ceph.mds_failover())
            else:
                name = kind.removeprefix("kill:")
                before = self.note(self.daemons.sample()).get(name)
                if before:
                    self.before_kills.setdefault(name, []).append(before)
                back = self.daemons.kill9(name)
                record["restarts"] = back.get("restarts")
            record["recovered_after_s"] = round(time.monotonic() - t0, 1)
            record["happened"] = True
        except Exception as exc:  # noqa: BLE001 - reported as a fault that did not happen
            record["happened"], record["error"] = False, str(exc)[:300]
        finally:
            self.windows.close(window)
        checked, bad = self.verify_all()
        record["read_back"] = {"checked": checked, "mismatches": bad[:20]}
        for what in bad:
            self.stats.mismatch(f"after {kind}: {what}")
        return record

    def verify_all(self) -> tuple[int, list[str]]:
        with ThreadPoolExecutor(len(self.traffic)) as pool:
            results = list(pool.map(lambda t: t.verify(), self.traffic))
        return sum(n for n, _ in results), [b for _, bad in results for b in bad]

    # ------------------------------------------------------------------- the run
    def run(self) -> dict:
        self.t0 = time.monotonic()
        warmup = min(max(self.seconds * 0.1, 10.0), 120.0)
        full_seconds = 60.0 if self.seconds >= 600 else 15.0
        plan = self.schedule(warmup)
        for t in self.traffic:
            t.start()
        sampling = threading.Event()
        sampler = threading.Thread(target=self.sample_every, args=(sampling,), daemon=True)
        sampler.start()
        time.sleep(warmup)
        start, started = self.note(self.sample()), time.monotonic()
        for at, kind in plan:
            wait = self.t0 + at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self.faults.append(self.inject(kind, full_seconds))
        rest = self.t0 + self.seconds - time.monotonic()
        if rest > 0:
            time.sleep(rest)
        for t in self.traffic:
            t.stop.set()
        for t in self.traffic:
            t.join(300)
        ended = time.monotonic()
        sampling.set()
        sampler.join(60)
        end = self.note(self.sample())
        checked, bad = self.verify_all()
        for what in bad:
            self.stats.mismatch(f"final: {what}")
        memory = growth(start, self.before_kills, end, (ended - started) / 3600, self.series,
                        warmup, LEAK_ALLOWANCE_MIB, LEAK_MIB_PER_HOUR, FD_ALLOWANCE)
        for name, m in memory.items():
            if name.startswith("ceph-"):   # Ceph's own: reported, not judged
                m["over_limit"], m["leak"] = m["leak"], False
        return self.report(plan, memory, checked, ended - self.t0)

    def sample(self) -> dict:
        """Memory and descriptors of every daemon (Ceph's too, with --ceph)."""
        return {**self.daemons.sample(), **(self.ceph.sample() if self.ceph else {})}

    def note(self, sample: dict) -> dict:
        """Add ``sample`` to the run's series (for the leak rule); return it."""
        self.series.append([round(time.monotonic() - self.t0, 1), sample])
        return sample

    def sample_every(self, done: threading.Event) -> None:
        """Sample every daemon every SAMPLE_S (a third of that in a run under 10 minutes)."""
        every = SAMPLE_S if self.seconds >= 600 else SAMPLE_S / 3
        while not done.wait(every):
            with contextlib.suppress(Exception):   # a daemon between two lives: next time
                self.note(self.sample())

    def report(self, plan, memory, checked, elapsed) -> dict:
        classes = self.stats.table()
        with self.stats.lock:
            unexpected = {c: v[:10] for c, v in self.stats.unexpected.items()}
            expected = {c: sorted(set(x[:120] for x in v))[:5]
                        for c, v in self.stats.expected.items()}
            mismatches = list(self.stats.mismatches)
        wanted = {c for t in self.traffic for c in t.classes}
        idle = sorted(c for c in wanted if not classes.get(c, {}).get("ops"))
        missed = [f["kind"] for f in self.faults if not f["happened"]] + \
            [k for _, k in plan[len(self.faults):]]
        leaks = sorted(n for n, m in memory.items() if m["leak"])
        failures = []
        if unexpected:
            failures.append(f"unexpected errors in {sorted(unexpected)}")
        if mismatches:
            failures.append(f"{len(mismatches)} read-back mismatches")
        if leaks:
            failures.append(f"leaks: {leaks}")
        if idle:
            failures.append(f"classes without operations: {idle}")
        if missed:
            failures.append(f"faults that did not happen: {missed}")
        return {"minutes": round(self.seconds / 60, 1), "elapsed_s": round(elapsed),
                "ceph": self.ceph is not None,
                "classes": classes, "faults": self.faults, "memory": memory,
                "read_back": {"checked_at_end": checked, "mismatches": mismatches[:50],
                              "ok": not mismatches},
                "unexpected_errors": unexpected, "expected_refusal_kinds": expected,
                "leak_rule": {"allowance_mib": LEAK_ALLOWANCE_MIB,
                              "mib_per_hour": LEAK_MIB_PER_HOUR,
                              "fd_allowance": FD_ALLOWANCE},
                "series": [[t, {n: [u["pid"], u["pss_mib"], u["rss_mib"], u["fds"]]
                                for n, u in sample.items()}] for t, sample in self.series],
                "failures": failures, "ok": not failures}


def fill(path: Path) -> int:
    """Write ``path``/filler until its file system refuses a single byte more."""
    written = 0
    with open(path / "filler", "wb", buffering=0) as f:
        for block in (1 << 20, 64 << 10, 4096):
            chunk = b"\0" * block
            while True:
                try:
                    written += f.write(chunk)
                except OSError:
                    break
        with contextlib.suppress(OSError):
            os.fsync(f.fileno())
    return written


def print_report(r: dict) -> None:
    print(f"\nsoak: {r['minutes']} min asked, {r['elapsed_s']} s run (strata up "
          f"{r['setup_s']['strata_up']} s, provisioning {r['setup_s']['provision']} s before)")
    print(f"{'class':<22}{'ops':>7}{'p50 ms':>9}{'p99 ms':>9}{'refused':>9}{'unexp':>7}"
          f"{'gave up':>9}")
    for c, row in r["classes"].items():
        print(f"{c:<22}{row['ops']:>7}{str(row['p50_ms']):>9}{str(row['p99_ms']):>9}"
              f"{row['expected_refusals']:>9}{row['unexpected_errors']:>7}{row['gave_up']:>9}")
    print("\nfaults:")
    for f in r["faults"]:
        print(f"  {f['at_s']:>7.1f} s  {f['kind']:<28} "
              f"{'back after ' + str(f.get('recovered_after_s')) + ' s' if f['happened'] else 'FAILED ' + f.get('error', '')}"
              f"  read back {f['read_back']['checked']}, "
              f"{len(f['read_back']['mismatches'])} mismatches")
    print(f"\n{'daemon':<22}{'PSS start':>10}{'max':>8}{'end':>8}{'MiB/h':>9}{'RSS start':>10}"
          f"{'RSS end':>9}{'fds':>11}{'judged':>8}  leak (PSS in MiB; max: end or just before "
          f"a kill; judged: the largest rise over the second half of a life)")
    for n, m in r["memory"].items():
        s, e = m["start"], m["end"] or {}
        print(f"{n:<22}{s['pss_mib']:>10}{round(s['pss_mib'] + m.get('pss_growth_mib', 0), 1):>8}"
              f"{e.get('pss_mib', '-'):>8}{str(m.get('pss_growth_mib_per_hour')):>9}"
              f"{s['rss_mib']:>10}{e.get('rss_mib', '-'):>9}"
              f"{str(s.get('fds', '-')) + '->' + str(e.get('fds', '-')):>11}"
              f"{str(m.get('judged_rise_mib', '-')):>8}  "
              f"{'LEAK' if m['leak'] else 'not judged' if n.startswith('ceph-') else 'no'}")
    print("\nPSS (MiB) through the run, a life per line, [seconds into the run, PSS], at most "
          "12 samples each:")
    for n in r["memory"]:
        for life in lives_of(n, [[t, {k: {"pid": v[0], "pss_mib": v[1], "processes": 1}
                                          for k, v in sample.items()}]
                                     for t, sample in r["series"]]).values():
            step = max(1, len(life) // 12)
            print(f"  {n:<20}" + " ".join(f"{t:.0f}:{m:.0f}" for t, m in life[::step]))
    print(f"\nread back at the end: {r['read_back']['checked_at_end']} items, "
          f"{'all OK' if r['read_back']['ok'] else 'MISMATCHES'}")
    for c, errs in r["unexpected_errors"].items():
        print(f"unexpected {c}: {errs[:3]}")
    print("RESULT: " + ("OK" if r["ok"] else "FAILED: " + "; ".join(r["failures"])))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--keys", type=int, default=None,
                   help="key space per writer (default: 32 below 10 minutes, else 128)")
    p.add_argument("--json", help="write the report as JSON to this file")
    p.add_argument("--keep-logs", help="copy the appliance's logs into this directory")
    p.add_argument("--ceph", action="store_true",
                   help="the checkpoint burst and S3 on a ceph pool of a development cluster, "
                        "with an OSD killed and revived and an MDS failover")
    p.add_argument("--record", action="store_true",
                   help="append the run to bench/results/soak.jsonl and rewrite soak.md")
    args = p.parse_args(argv)
    # started in the background by a shell, SIGINT would be ignored, by `strata up` too (it
    # inherits that), and its Ctrl-C stop could not work
    signal.signal(signal.SIGINT, signal.default_int_handler)
    keys = args.keys or (32 if args.minutes < 10 else 128)
    ceph = CephFaults(Path(tempfile.mkdtemp(prefix="strata-test-soak-ceph-"))) \
        if args.ceph else None
    app = Appliance(pool_size="4G", extra_args=("--s3-pool", CEPH_POOL) if ceph else ())
    soak = Soak(app, args.minutes, keys, ceph)
    t0 = time.monotonic()
    try:
        if ceph:
            ceph.up()
            app.start(timeout=300)
            # the gateway's pool must exist when `strata up` starts to serve S3 from it
            Plane(app.credentials)("POST", "pools/", {
                "name": CEPH_POOL, "driver": "ceph", "ceph_conf": str(ceph.cluster.conf),
                "ceph_client": ceph.cluster.client, "redundancy": "replicated:3",
                "failure_domain": "host"}, timeout=300)
            app.stop()
        app.start(timeout=300)
        drain(app)
        if ceph:
            wait_s3(app)
        started = time.monotonic()
        soak.provision()
        provisioned = time.monotonic()
        report = soak.run()
        report["setup_s"] = {"strata_up": round(started - t0),
                             "provision": round(provisioned - started)}
    finally:
        for t in soak.traffic:
            t.stop.set()
        if args.keep_logs and (app.data_dir / "log").is_dir():
            shutil.copytree(app.data_dir / "log", args.keep_logs, dirs_exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copy(app.data_dir / "soak-up.log", args.keep_logs)
        try:
            cleanup(app, soak.user)
        finally:
            if ceph:
                ceph.destroy()
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if args.record:
        record(report)
    return 0 if report["ok"] else 1


def wait_s3(app: Appliance, timeout: float = 300) -> None:
    """Wait until the S3 gateway serves (on a ceph pool it starts once the pool is mounted)."""
    import boto3
    creds = app.credentials
    deadline = time.monotonic() + timeout
    while True:
        try:
            boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                         aws_access_key_id=creds["s3_access_key"],
                         aws_secret_access_key=creds["s3_secret_key"],
                         region_name="us-east-1").list_buckets()
            return
        except Exception:  # noqa: BLE001 - not serving yet (or no S3 key yet)
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
            creds = app.credentials


def drain(app: Appliance) -> None:
    """Keep reading what `strata up` prints (into its data directory's soak-up.log): a pipe
    nobody reads would block it once full, and a long soak makes it print a lot."""
    log = app.data_dir / "soak-up.log"

    def copy():
        with open(log, "a") as out:
            for line in app.proc.stdout:
                out.write(line)
                out.flush()
    threading.Thread(target=copy, daemon=True).start()


def cleanup(app: Appliance, user: str) -> None:
    from services.file.daemons import nfs_server
    from services.file.tests.plane_support import drop_unix_user
    try:
        if app.proc and app.proc.poll() is None:
            with contextlib.suppress(Exception):
                app.stop()
        nfs_server(app.data_dir, {}).unbind_all()   # if strata up died: its btrfs binds
    finally:
        app.destroy()
        if user:
            drop_unix_user(user)


def record(report: dict) -> None:
    from bench.results import record as append
    append("soak", {k: report[k] for k in ("minutes", "ceph", "elapsed_s", "classes", "faults",
                                           "memory", "read_back", "failures", "ok")})
    write_summary()


def write_summary() -> None:
    """Rewrite results/soak.md from results/soak.jsonl."""
    from bench.results import runs, write_table
    rows = []
    for run in runs("soak"):
        ops = sum(c["ops"] for c in run["classes"].values())
        refused = sum(c["expected_refusals"] for c in run["classes"].values())
        unexp = sum(c["unexpected_errors"] for c in run["classes"].values())
        worst = max(((m.get("pss_growth_mib_per_hour") or 0, n)
                     for n, m in run["memory"].items() if not n.startswith("ceph-")),
                    default=(0, "-"))   # Ceph's own daemons are reported, not judged
        judged = max(((m["judged_rise_mib"], n) for n, m in run["memory"].items()
                      if not n.startswith("ceph-") and m.get("judged_rise_mib") is not None),
                     default=None)   # runs since the rule judges lives (older ones: "-")
        rows.append([run["time"], run["commit"],
                     f"{run['minutes']}{' on ceph' if run.get('ceph') else ''}", str(ops),
                     str(refused),
                     str(unexp), str(sum(f["happened"] for f in run["faults"])),
                     f"{worst[1]} {worst[0]}",
                     f"{judged[1]} {judged[0]}" if judged else "-",
                     "OK" if run["read_back"]["ok"] else "MISMATCH",
                     "pass" if run["ok"] else "FAIL"])
    write_table("soak", "Soak: mixed load with faults (bench/soak.py)",
                ["time", "commit", "min", "ops", "expected refusals", "unexpected",
                 "faults", "largest PSS growth MiB/h", "largest judged rise MiB",
                 "read-back", "result"], rows)


if __name__ == "__main__":
    sys.exit(main())
