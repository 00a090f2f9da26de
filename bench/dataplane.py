#!/usr/bin/env python3
"""Dataplane benchmark (local btrfs driver; run as root):

1. snapshot time of a 1 GiB and a 16 GiB volume filled with non-zero data (``--fill full``
   writes every byte; ``--fill sparse`` writes 256 KiB of every 1 MiB, so extents cover the
   whole volume with a quarter of the writes) — it should not grow with size. The fill is
   committed first; before each timed snapshot 4 MiB are rewritten and fsynced, so every
   snapshot also commits a little fresh data, the same for both sizes;
2. volume write throughput (sequential 1 MiB writes + fsync of ``--gib`` GiB) as a ratio to
   raw disk: the same bytes + fsync written to a plain file on the file system that holds
   the pool's image (the disk below the pool).

Medians of ``--runs`` runs. Everything lives in a ``/tmp/strata-test-bench-*`` directory that
is removed at the end (``tests/cleanup_leftovers.py`` clears it after a crash).

    .venv/bin/python bench/dataplane.py [--gib 2] [--runs 3] [--fill full|sparse]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataplane import DeviceSpec, LocalDriver, local_available  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


def write_sequential(path: Path, total: int, block: bytes, create: bool) -> float:
    """Write ``total`` bytes in ``len(block)`` writes, fsync; return seconds."""
    flags = os.O_WRONLY | (os.O_CREAT | os.O_TRUNC if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        start = time.perf_counter()
        done = 0
        while done < total:
            done += os.write(fd, block)
        os.fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def fill_volume(path: str, size: int, mode: str, block: bytes) -> int:
    """Write non-zero data over the volume; return the bytes written."""
    fd = os.open(path, os.O_WRONLY)
    written = 0
    try:
        if mode == "full":
            while written < size:
                written += os.write(fd, block)
        else:
            piece = block[: 256 * 1024]
            for off in range(0, size, MiB):
                written += os.pwrite(fd, piece, off)
        os.fsync(fd)
    finally:
        os.close(fd)
    return written


def time_snapshots(drv, pool: str, vol: str, runs: int, block: bytes) -> list:
    """Seconds per snapshot; before each, dirty a few MiB so every snapshot commits work."""
    path = drv.volume_info(pool, vol).path
    size = drv.volume_info(pool, vol).size_bytes
    times = []
    for i in range(runs):
        fd = os.open(path, os.O_WRONLY)
        try:
            for k in range(4):
                os.pwrite(fd, block, ((i * 7 + k * 13) * MiB * 3) % (size - MiB))
            os.fsync(fd)
        finally:
            os.close(fd)
        start = time.perf_counter()
        drv.create_snapshot(pool, "volume", vol, f"s{i}")
        times.append(time.perf_counter() - start)
    return times


def fmt_ms(values) -> str:
    return (f"median {statistics.median(values) * 1000:.1f} ms over {len(values)} "
            f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Strata dataplane benchmark")
    parser.add_argument("--gib", type=int, default=2, help="GiB written per throughput run")
    parser.add_argument("--runs", type=int, default=3, help="runs per measurement")
    parser.add_argument("--fill", choices=("full", "sparse"), default="full",
                        help="how the snapshot volumes are written (default full)")
    parser.add_argument("--json", action="store_true", help="also print a JSON summary")
    args = parser.parse_args(argv)
    ok, why = local_available()
    if not ok:
        print(f"bench/dataplane.py needs the local driver: {why}", file=sys.stderr)
        return 2

    state = Path(tempfile.mkdtemp(prefix="strata-test-bench-"))
    pool_bytes = (17 + args.gib + 3) * GiB
    need = (1 + 16 if args.fill == "full" else 5) * GiB + 2 * args.gib * GiB
    free = shutil.disk_usage(state).free
    if free < need + 2 * GiB:
        print(f"not enough free space in {state.parent}: need ~{(need + 2 * GiB) // GiB} GiB, "
              f"have {free // GiB} GiB (try --fill sparse or a smaller --gib)", file=sys.stderr)
        shutil.rmtree(state)
        return 2
    drv = LocalDriver(state)
    block = os.urandom(MiB)
    summary = {}
    try:
        drv.create_pool("bench", [DeviceSpec(f"image:{pool_bytes}")])
        print(f"pool: btrfs on a loop-attached sparse image of {pool_bytes // GiB} GiB "
              f"in {state}")

        # -- throughput ---------------------------------------------------------------
        total = args.gib * GiB
        vol_t, raw_t = [], []
        for i in range(args.runs):
            raw = state / "raw.bin"
            raw_t.append(write_sequential(raw, total, block, create=True))
            raw.unlink()
            v = drv.create_volume("bench", f"tp{i}", total)
            vol_t.append(write_sequential(Path(v.path), total, block, create=False))
            drv.delete_volume("bench", f"tp{i}")
        vol_mbs = total / statistics.median(vol_t) / 1e6
        raw_mbs = total / statistics.median(raw_t) / 1e6
        print(f"volume write, sequential 1 MiB writes + fsync of {args.gib} GiB: "
              f"median {vol_mbs:.0f} MB/s over {args.runs} runs")
        print(f"raw disk (same bytes + fsync to a plain file on {state.parent}'s file "
              f"system): median {raw_mbs:.0f} MB/s")
        print(f"volume write throughput ratio to raw disk: {vol_mbs / raw_mbs:.2f}")
        summary["write"] = {"volume_MBps": vol_mbs, "raw_MBps": raw_mbs,
                            "ratio": vol_mbs / raw_mbs, "gib": args.gib, "runs": args.runs}
        subprocess.run(["btrfs", "subvolume", "sync", drv.pool_info("bench").mountpoint],
                       capture_output=True)

        # -- snapshots ----------------------------------------------------------------
        snaps = {}
        for gib in (1, 16):
            name = f"v{gib}g"
            drv.create_volume("bench", name, gib * GiB)
            start = time.perf_counter()
            written = fill_volume(drv.volume_info("bench", name).path, gib * GiB, args.fill,
                                  block)
            took = time.perf_counter() - start
            # fsync on btrfs writes only the log tree; commit the fill's metadata now so the
            # snapshots below measure themselves, not the fill (each still has 4 MiB dirty)
            subprocess.run(["btrfs", "filesystem", "sync", drv.pool_info("bench").mountpoint],
                           capture_output=True)
            times = time_snapshots(drv, "bench", name, max(args.runs, 7), block)
            snaps[gib] = statistics.median(times)
            what = ("every byte written" if args.fill == "full" else
                    "256 KiB of non-zero data in every 1 MiB (sparse fill)")
            print(f"snapshot of a {gib} GiB volume ({what}: {written // MiB} MiB in "
                  f"{took:.1f} s): {fmt_ms(times)}")
            summary[f"snapshot_{gib}g_ms"] = snaps[gib] * 1000
        ratio = snaps[16] / snaps[1]
        verdict = "does not grow with size" if ratio < 3 else "GROWS with size"
        print(f"snapshot time 16 GiB / 1 GiB: {ratio:.2f}x ({verdict})")
        summary["snapshot_ratio_16_to_1"] = ratio
        summary["fill"] = args.fill
        if args.json:
            print(json.dumps(summary, indent=2))
    finally:
        try:
            for v in drv.list_volumes("bench"):
                drv.delete_volume("bench", v)
            drv.destroy_pool("bench")
        except Exception as exc:  # keep cleaning
            print(f"cleanup: {exc}", file=sys.stderr)
        subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "tests" /
                                            "cleanup_leftovers.py"), "--prefix", str(state)],
                       capture_output=True)
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
