#!/usr/bin/env python3
"""Data protection benchmark (local btrfs driver, a Strata S3 gateway subprocess and Redis;
run as root):

1. raw read: every file of a ``--mib`` MiB file system read cold (page cache dropped for
   those files only, with posix_fadvise), the reference for the next two;
2. backup throughput: a full backup (``btrfs send`` → 8 MiB chunks → zlib → S3 PUT to the
   gateway) and a replication-style copy (``send`` → ``receive`` into a second pool, no
   network), each as MiB/s of stream and as a ratio to raw read;
3. incremental vs full: the time of an incremental backup after 1% of the data changed,
   against the full one;
4. foreground-writer ratio: a writer (1 MiB writes + fsync, calling the budget's
   ``foreground()`` as the checkpoint path would) alone, then while a migration copies the
   file system to the capacity pool (send → receive, as a tier move) through the budget
   (``--budget-mbps``, background keeps 10% while foreground is busy), then while it is read
   with no budget; interleaved ``--rounds`` times, medians; the aim is >= 0.8;
5. the same writer while the flash pool is scrubbed (``btrfs scrub`` paced by the budget's
   ``scrub`` class through ``iobudget.Pacer`` as the scrub task does: the kernel's scrub
   limit follows the rate, foreground traffic and long waits pause the scrub), and while
   it is scrubbed with no budget, against the writer alone just before (once btrfs has
   cleaned up the migrations' deleted copies).

Data is incompressible (like checkpoint shards). Everything lives in a
``/tmp/strata-test-bench-*`` directory removed at the end. Two loop devices are used.

    .venv/bin/python bench/protection.py [--mib 512] [--budget-mbps 100] \
        [--redis redis://127.0.0.1:6379/10] [--seconds 4] [--rounds 3] [--json]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis

from dataplane import DeviceSpec, LocalDriver, local_available
from dataplane.errors import InvalidArgument
from services.protection import objstore
from dataplane.errors import Cancelled
from plumbing.iobudget import PREFIX, BudgetConfig, IOBudget, Pacer

MiB = 1 << 20


def drop_cache(root: Path) -> None:
    """Sync, then drop the page cache of the files under ``root`` only."""
    os.sync()
    for dirpath, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def read_all(root: Path) -> int:
    total = 0
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".snapshots"]
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as fh:
                while block := fh.read(4 * MiB):
                    total += len(block)
    return total


def writer(path: Path, seconds: float, budget: IOBudget | None) -> float:
    """MiB/s of 1 MiB writes + fsync for ``seconds`` (file rewritten in 64 MiB rounds)."""
    block = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    done, start = 0, time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            if budget is not None:
                budget.foreground()
            if done and done % (64 * MiB) == 0:
                os.lseek(fd, 0, os.SEEK_SET)
            done += os.write(fd, block)
            os.fsync(fd)
    finally:
        os.close(fd)
    return done / MiB / (time.perf_counter() - start)


def start_gateway(workdir: Path) -> tuple:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = workdir / "gateway.json"
    cfg.write_text(json.dumps({"data_root": str(workdir / "s3"), "region": "us-east-1",
                               "admin_token": "", "users": {
                                   "BENCH": {"secret_key": "bench-secret", "user": "b",
                                             "admin": True}}}))
    proc = subprocess.Popen([sys.executable, "-m", "services.object.gateway", "--config",
                             str(cfg), "--port", str(port)],
                            cwd=Path(__file__).resolve().parents[1],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    s3 = objstore.s3_client(f"http://127.0.0.1:{port}", "BENCH", "bench-secret")
    s3.create_bucket(Bucket="bench")
    return proc, s3


def timed_backup(drv, s3, snap, parent, key) -> tuple:
    start = time.perf_counter()
    stream = drv.send_snapshot("flash", "filesystem", "data", snap, parent)
    fields = objstore.put_stream(s3, "bench", key, stream)
    return time.perf_counter() - start, fields["stream_bytes"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Strata data protection benchmark")
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--budget-mbps", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/10")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or not local_available():
        print("needs root and btrfs-progs", file=sys.stderr)
        return 2
    state = Path(tempfile.mkdtemp(prefix="strata-test-bench-"))
    drv = LocalDriver(state)
    size = f"{max(1024, args.mib * 3)}M"
    gw = None
    out = {}
    try:
        drv.create_pool("flash", [DeviceSpec(f"image:{size}")], media="flash")
        drv.create_pool("cap", [DeviceSpec(f"image:{size}")], media="capacity")
        root = Path(drv.create_filesystem("flash", "data").path)
        files = max(1, args.mib // 32)
        for i in range(files):
            (root / f"shard-{i:04d}").write_bytes(os.urandom(32 * MiB))
        drop_cache(root)
        start = time.perf_counter()
        nbytes = read_all(root)
        raw = nbytes / MiB / (time.perf_counter() - start)
        out["raw_read_mibps"] = round(raw, 1)

        gw, s3 = start_gateway(state)
        drv.create_snapshot("flash", "filesystem", "data", "full")
        drop_cache(root)
        secs, streamed = timed_backup(drv, s3, "full", None, "full")
        out["backup_full_mibps"] = round(streamed / MiB / secs, 1)
        out["backup_to_raw_ratio"] = round(streamed / MiB / secs / raw, 2)
        out["backup_full_seconds"] = round(secs, 2)

        drop_cache(root)
        start = time.perf_counter()
        drv.receive_snapshot("cap", "filesystem", "copy",
                             drv.send_snapshot("flash", "filesystem", "data", "full"), "full")
        secs_r = time.perf_counter() - start
        out["send_receive_mibps"] = round(nbytes / MiB / secs_r, 1)
        out["send_receive_to_raw_ratio"] = round(nbytes / MiB / secs_r / raw, 2)
        drv.delete_filesystem("cap", "copy")

        # 1% change: rewrite the first 1% of the bytes, spread over the shards
        change = max(MiB, nbytes // 100)
        per = max(64 << 10, change // files)
        for i in range(files):
            with open(root / f"shard-{i:04d}", "r+b") as fh:
                fh.write(os.urandom(per))
        drv.create_snapshot("flash", "filesystem", "data", "incr")
        secs_i, streamed_i = timed_backup(drv, s3, "incr", "full", "incr")
        out["incremental_seconds"] = round(secs_i, 2)
        out["incremental_stream_mib"] = round(streamed_i / MiB, 1)
        out["incremental_to_full_time_ratio"] = round(secs_i / secs, 3)

        # foreground writer alone, then during a budgeted tier-move copy
        client = redis.Redis.from_url(args.redis)
        for key in client.scan_iter(PREFIX + "*"):
            client.delete(key)
        budget = IOBudget(client, BudgetConfig(rate=args.budget_mbps * MiB,
                                               foreground_share=0.1))
        wfile = root / "foreground.bin"
        unlimited = IOBudget(client, BudgetConfig())

        def during_migration(b: IOBudget) -> tuple:
            stop = threading.Event()
            moved = {"bytes": 0}

            def budgeted(stream):
                for chunk in stream:
                    b.take(len(chunk), "migration", should_stop=stop.is_set)
                    if stop.is_set():
                        return  # a cut stream: receive discards it
                    moved["bytes"] += len(chunk)
                    yield chunk

            def migrate():  # what a tier move does: send from flash, receive into capacity
                n = 0
                while not stop.is_set():
                    n += 1
                    stream = drv.send_snapshot("flash", "filesystem", "data", "incr")
                    try:
                        drv.receive_snapshot("cap", "filesystem", f"mig-{n}",
                                             budgeted(stream), "incr")
                        drv.delete_filesystem("cap", f"mig-{n}")
                    except InvalidArgument:
                        pass  # stopped mid-stream: nothing was kept
                    finally:
                        stream.close()
            t = threading.Thread(target=migrate)
            t.start()
            try:
                mibps = writer(wfile, args.seconds, b)
            finally:
                stop.set()
                t.join()
            return mibps, moved["bytes"] / MiB / args.seconds

        def during_scrub(b: IOBudget | None) -> tuple:
            stop = threading.Event()
            scrubbed = {"bytes": 0}

            def scrub():  # scrubs of the flash pool, one after the other, until stopped
                while not stop.is_set():
                    pace = Pacer(b or unlimited, "scrub", yield_to_foreground=True)

                    def count(nbytes, pace=pace):
                        scrubbed["bytes"] += nbytes
                        return pace(nbytes) if b is not None else 0.0
                    count.rate = pace.rate  # as the scrub task's pacer
                    try:
                        drv.scrub_pool("flash", throttle=count, should_cancel=stop.is_set)
                    except Cancelled:
                        pass
            t = threading.Thread(target=scrub)
            t.start()
            try:
                mibps = writer(wfile, args.seconds, b or unlimited)
            finally:
                stop.set()
                t.join()
            return mibps, scrubbed["bytes"] / MiB / args.seconds

        alone, budgeted, unbudgeted, moved_b, moved_u = [], [], [], [], []
        alone_s, scrub_b, scrub_u, scrubbed_b, scrubbed_u = [], [], [], [], []
        cap_mnt = drv.pool_info("cap").mountpoint
        for _ in range(args.rounds):  # interleaved, medians: the disk is shared and noisy
            alone.append(writer(wfile, args.seconds, budget))
            w, m = during_migration(budget)
            budgeted.append(w)
            moved_b.append(m)
            w, m = during_migration(unlimited)
            unbudgeted.append(w)
            moved_u.append(m)
            # the migrations' copies are deleted: let btrfs clean them up (it writes a lot
            # in the background), then the writer alone again as the scrub's reference
            subprocess.run(["btrfs", "subvolume", "sync", cap_mnt], capture_output=True)
            os.sync()
            alone_s.append(writer(wfile, args.seconds, budget))
            w, m = during_scrub(budget)
            scrub_b.append(w)
            scrubbed_b.append(m)
            w, m = during_scrub(None)
            scrub_u.append(w)
            scrubbed_u.append(m)
        med = statistics.median
        out["writer_alone_mibps"] = round(med(alone), 1)
        out["writer_during_budgeted_migration_mibps"] = round(med(budgeted), 1)
        out["foreground_ratio"] = round(med(budgeted) / med(alone), 2)
        out["migration_mibps_budgeted"] = round(med(moved_b), 1)
        out["writer_during_unbudgeted_migration_mibps"] = round(med(unbudgeted), 1)
        out["foreground_ratio_without_budget"] = round(med(unbudgeted) / med(alone), 2)
        out["migration_mibps_unbudgeted"] = round(med(moved_u), 1)
        out["writer_alone_before_scrub_mibps"] = round(med(alone_s), 1)
        out["writer_during_budgeted_scrub_mibps"] = round(med(scrub_b), 1)
        out["foreground_ratio_during_scrub"] = round(med(scrub_b) / med(alone_s), 2)
        out["scrub_mibps_budgeted"] = round(med(scrubbed_b), 1)
        out["writer_during_unbudgeted_scrub_mibps"] = round(med(scrub_u), 1)
        out["foreground_ratio_during_scrub_without_budget"] = round(
            med(scrub_u) / med(alone_s), 2)
        out["scrub_mibps_unbudgeted"] = round(med(scrubbed_u), 1)
        out["budget_mbps"] = args.budget_mbps
        out["data_mib"] = round(nbytes / MiB)
        for key, value in out.items():
            print(f"{key:42s} {value}")
        if args.json:
            print(json.dumps(out, indent=2))
    finally:
        if gw is not None:
            gw.terminate()
            gw.wait(10)
        for pool in ("flash", "cap"):
            try:
                for fs in drv.list_filesystems(pool):
                    drv.delete_filesystem(pool, fs)
                drv.destroy_pool(pool)
            except Exception as exc:  # keep cleaning
                print(f"cleanup {pool}: {exc}", file=sys.stderr)
        subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "tests" /
                                            "cleanup_leftovers.py"), "--prefix", str(state)],
                       capture_output=True)
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
