#!/usr/bin/env python3
"""What a sample reader waits for during a checkpoint burst (a diagnostic for
bench/burst_shares.py): one appliance, then per protocol (NFS, S3) a reader alone and the
same reader during J x R ranks' saves, and for each window

- the reader's per-request latency (S3: GET until the answer's headers, then the body;
  NFS: open, each max_read READ, close), median and p90;
- CPU seconds per second of each party: Ganesha, the S3 gateway's workers, the rest of the
  appliance, the bench's burst clients (this process), the reader's process, and the
  host's other processes; the host's idle and iowait;
- the disk under the pools (vda): MiB read and written per second, its busy fraction and
  the mean wait of a read and of a write (from /proc/diskstats).

Run as root: .venv/bin/python bench/burst_why.py [--jobs 8 --ranks 4 --shard-mib 8]
[--shares on|off|max] [--repeat 2] [--clients grouped|ungrouped] [--protocols nfs,s3]
[--loop-scheduler mq-deadline]. It prints; it records nothing.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import burst_shares as bs                     # noqa: E402
from bench.checkpoint_burst import Api                    # noqa: E402
from tests.appliance import Appliance                     # noqa: E402

MiB = bs.MiB
TICK = os.sysconf("SC_CLK_TCK")


def _latencies(conn, lat) -> None:
    conn.send(lat)
    conn.close()


def s3_reader(creds, bucket, keys, conn, counter, stop) -> None:
    s3 = bs.s3_client(creds)
    lat = {"headers": [], "body": []}
    while not stop.is_set():
        for key in keys:
            if stop.is_set():
                break
            t0 = time.perf_counter()
            body = s3.get_object(Bucket=bucket, Key=key)["Body"]
            t1 = time.perf_counter()
            while block := body.read(MiB):
                with counter.get_lock():
                    counter.value += len(block)
            lat["headers"].append(t1 - t0)
            lat["body"].append(time.perf_counter() - t1)
    _latencies(conn, lat)


def nfs_reader(port, pseudo, names, local_dir, conn, counter, stop) -> None:
    client = bs._nfs(port, pseudo)
    buf = bytearray(client.io_limits.max_read)
    lat = {"open": [], "read": []}
    while not stop.is_set():
        for name in names:
            if stop.is_set():
                break
            t0 = time.perf_counter()
            with client.open(f"train/{name}", "rb") as f:
                lat["open"].append(time.perf_counter() - t0)
                while True:
                    t1 = time.perf_counter()
                    n = f.readinto(buf)
                    lat["read"].append(time.perf_counter() - t1)
                    if not n:
                        break
                    with counter.get_lock():
                        counter.value += n
            fd = os.open(os.path.join(local_dir, name), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    _latencies(conn, lat)


class Reader(bs.StreamReader):
    def __init__(self, target, *args, groups=None):
        self.parent, child = mp.Pipe()
        super().__init__(target, *args, child, groups=groups)

    def latencies(self) -> dict:
        self.stop.set()
        lat = self.parent.recv() if self.parent.poll(20) else {}
        self.close()
        return lat


def cpu_ticks(parties: dict) -> dict:
    """CPU ticks (user + system) of every process, summed per party."""
    out = {k: 0 for k in parties["names"]}
    parties["refresh"]()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        ticks = int(fields[11]) + int(fields[12])
        out[parties["classify"](int(pid), cmd)] += ticks
    return out


def host_cpu() -> list[int]:
    return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]


def disks() -> dict:
    """/proc/diskstats of vda and the loop devices: reads, merged, sectors, ms reading,
    writes, merged, sectors, ms writing, in flight, ms busy, weighted ms."""
    out = {}
    for line in Path("/proc/diskstats").read_text().splitlines():
        f = line.split()
        if f[2] == "vda" or f[2].startswith("loop"):
            out[f[2]] = [int(x) for x in f[3:14]]
    return out


def snapshot(parties) -> dict:
    return {"t": time.perf_counter(), "cpu": cpu_ticks(parties), "host": host_cpu(),
            "disk": disks()}


def report(label: str, a: dict, b: dict, lat: dict, rate: float) -> None:
    dt = b["t"] - a["t"]
    cpu = {k: (b["cpu"][k] - a["cpu"][k]) / TICK / dt for k in a["cpu"]}
    h = [y - x for x, y in zip(a["host"], b["host"])]
    total = sum(h) or 1
    deltas = {n: [y - x for x, y in zip(a["disk"].get(n, b["disk"][n]), b["disk"][n])]
              for n in b["disk"]}
    print(f"{label}: " + (f"reader {rate / MiB:.1f} MiB/s " if rate else "") + f"over {dt:.1f} s")
    print("   cpu s/s: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
          + f"; host idle {h[3] / total:.0%}, iowait {h[4] / total:.0%}")
    loop = max((n for n in deltas if n != "vda"), key=lambda n: deltas[n][2] + deltas[n][6],
               default=None)
    for name in ("vda", loop) if loop else ("vda",):
        d = deltas[name]
        print(f"   {name}: read {d[2] * 512 / MiB / dt:.1f} MiB/s, write "
              f"{d[6] * 512 / MiB / dt:.1f} MiB/s, busy {d[9] / 1000 / dt:.0%}, wait per read "
              f"{d[3] / max(d[0], 1):.1f} ms, per write {d[7] / max(d[4], 1):.1f} ms, "
              f"queue {d[10] / 1000 / dt:.1f}")
    for k, v in lat.items():
        if v:
            v = sorted(v)
            print(f"   {k}: n {len(v)}, median {statistics.median(v) * 1000:.1f} ms, "
                  f"p90 {v[int(len(v) * 0.9)] * 1000:.1f} ms, sum {sum(v):.1f} s")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--jobs", type=int, default=8)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--shard-mib", type=int, default=8)
    p.add_argument("--samples-mib", type=int, default=128)
    p.add_argument("--shares", choices=("off", "on", "max"), default="on")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--protocols", default="nfs,s3")
    p.add_argument("--clients", choices=("grouped", "ungrouped"), default="grouped")
    p.add_argument("--loop-scheduler", default=None,
                   help="an I/O scheduler for the pool's loop device (e.g. mq-deadline)")
    a = p.parse_args()
    app = Appliance(pool_size="6G")
    reader_pid = [None]
    me = os.getpid()
    mine: set[int] = set()         # `strata up` and its descendants

    def refresh():
        kids: dict[int, list[int]] = {}
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(pid))
        todo = [app.proc.pid] if app.proc else []
        mine.clear()
        while todo:
            pid = todo.pop()
            mine.add(pid)
            todo += kids.get(pid, [])

    def classify(pid, cmd):
        if pid == reader_pid[0]:
            return "reader"
        if pid == me:
            return "burst clients"
        if "ganesha" in cmd and pid in mine:
            return "ganesha"
        if "services.object.gateway" in cmd and pid in mine:
            return "s3 gateway"
        if pid in mine:
            return "appliance other"
        return "host other"
    parties = {"names": ("reader", "burst clients", "ganesha", "s3 gateway", "appliance other",
                        "host other"), "classify": classify, "refresh": refresh}
    try:
        app.start()
        creds = app.credentials
        api = Api(app.url, creds["token"])
        if a.loop_scheduler:
            import json
            import subprocess
            devs = json.loads(subprocess.run(["losetup", "--list", "--json"], capture_output=True,
                                             text=True).stdout)["loopdevices"]
            for dev in devs:
                if str(app.data_dir) in (dev.get("back-file") or ""):
                    name = os.path.basename(dev["name"])
                    Path(f"/sys/block/{name}/queue/scheduler").write_text(a.loop_scheduler)
                    print(name, Path(f"/sys/block/{name}/queue/scheduler").read_text().strip())
        where = bs.prepare(api, creds, a.samples_mib)
        mode = {m: (s, c) for m, s, c in bs.MODES}[a.shares]
        bs.set_mode(api, *mode)
        groups = bs.ClientGroups(a.clients == "grouped")
        groups.join("burst", os.getpid())
        block = os.urandom(a.shard_mib * MiB)
        step = 0
        for rnd in range(a.repeat):
            for proto in a.protocols.split(","):
                def writers():
                    nonlocal step
                    step += 1
                    return (bs.nfs_writers(app.nfs_port, a.jobs, a.ranks, step, block)
                            if proto == "nfs" else bs.s3_writers(creds, a.jobs, a.ranks, step, block))
                b0 = snapshot(parties)
                solo = bs._burst(writers(), None)
                b1 = snapshot(parties)
                bs._clean(creds, where)
                reader = (Reader(nfs_reader, app.nfs_port, f"/{bs.SAMPLES}", where["names"],
                                 where["train"], groups=groups) if proto == "nfs"
                          else Reader(s3_reader, creds, bs.SAMPLES, where["keys"], groups=groups))
                reader_pid[0] = reader.proc.pid
                s0 = snapshot(parties)
                alone = reader.rate_over(4)
                s1 = snapshot(parties)
                lat_alone = reader.latencies()
                reader = (Reader(nfs_reader, app.nfs_port, f"/{bs.SAMPLES}", where["names"],
                                 where["train"], groups=groups) if proto == "nfs"
                          else Reader(s3_reader, creds, bs.SAMPLES, where["keys"], groups=groups))
                reader_pid[0] = reader.proc.pid
                w = writers()
                s2 = snapshot(parties)
                both = bs._burst(w, reader)
                s3 = snapshot(parties)
                lat_both = reader.latencies()
                bs._clean(creds, where)
                print(f"== {proto} round {rnd + 1}, shares {a.shares}, clients {a.clients}: burst "
                      f"{solo['rate'] / MiB:.1f} -> {both['rate'] / MiB:.1f} MiB/s "
                      f"({both['rate'] / solo['rate']:.2f}x), reader {both['reader'] / alone:.2f}x")
                report("  burst alone", b0, b1, {}, 0.0)
                report("  alone ", s0, s1, lat_alone, alone)
                report("  during", s2, s3, lat_both, both["reader"])
                sys.stdout.flush()
    finally:
        if "groups" in locals():
            groups.remove()
        app.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
