#!/usr/bin/env python3
"""File benchmark: Strata's NFS export against Ganesha set up by hand (the peer) and the
local file system (the limit), all on plain directories of the same disk.

Workloads: write ``--size-mib`` (default 1 GiB) in 16 MiB calls and read it back, then
create, stat and delete ``--files`` (default 2,000) empty files.

- Strata: an ``NfsServer`` (services.file.runtime) with the config Strata renders (tuned
  thread pool and RPC buffers, 4 MiB rsize/wsize, a snapshot companion export);
- peer: ``ganesha.nfsd`` started by hand with the minimal NFSv4 config of RECIPES.md
  (defaults for everything else);
- limit: the same operations with Python's own file calls on a local directory
  (write + one fsync at the end; reads after dropping the page cache of the file).

NFS client: nfs-rs over NFSv4.1 (each ``write`` call returns once its bytes are stable).
``--repeat`` rounds; in each, every workload runs on the three targets back to back, in an
order that rotates between rounds; medians are reported with the
ratios Strata / peer (aim >= 0.95) and Strata / limit. Everything lives under one
``/tmp/strata-test-bench-*`` directory, removed at the end; both daemons are stopped by PID.

    .venv/bin/python bench/file.py [--size-mib 1024] [--files 2000] [--repeat 3] [--json]
"""

from __future__ import annotations

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

from services.file.runtime import NfsClientRule, NfsExport, NfsServer, NfsSettings
from services.file.runtime.nfs_server import nfs_null_ping
from plumbing.process import free_port

MiB = 1 << 20
CALL = 16 * MiB

PEER_CONF = """NFS_CORE_PARAM {{ Protocols = 4; NFS_Port = {port}; Bind_addr = 127.0.0.1;
                 Enable_NLM = false; Enable_RQUOTA = false; Enable_UDP = false; }}
NFSV4 {{ Graceless = true; RecoveryBackend = fs; RecoveryRoot = {state};
        Allow_Numeric_Owners = true; Only_Numeric_Owners = true; }}
NFS_KRB5 {{ Active_krb5 = false; }}
EXPORT {{ Export_Id = 1; Path = {path}; Pseudo = /peer; Protocols = 4; Transports = TCP;
         Access_Type = RW; Squash = No_Root_Squash; SecType = sys; FSAL {{ Name = VFS; }}
         CLIENT {{ Clients = 127.0.0.1; Access_Type = RW; }} }}
"""


def drop_cache(path: str) -> None:
    """Evict ``path`` from the page cache so the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class LocalTarget:
    """The limit: plain file calls on a local directory."""

    name = "local"

    def __init__(self, directory: str):
        self.dir = directory

    def write(self, name: str, size: int, block: bytes) -> None:
        with open(os.path.join(self.dir, name), "wb") as f:
            f.writelines(block for _ in range(size // len(block)))
            f.flush()
            os.fsync(f.fileno())

    def read(self, name: str, size: int) -> int:
        buf, total = bytearray(CALL), 0
        with open(os.path.join(self.dir, name), "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
        return total

    def create(self, names):
        for n in names:
            open(os.path.join(self.dir, n), "wb").close()

    def stat(self, names):
        for n in names:
            os.stat(os.path.join(self.dir, n))

    def delete(self, names):
        for n in names:
            os.unlink(os.path.join(self.dir, n))

    def close(self):
        pass


class NfsTarget(LocalTarget):
    """An NFS export read and written with nfs-rs."""

    def __init__(self, name: str, directory: str, port: int, pseudo: str):
        import nfs_rs
        super().__init__(directory)
        self.name = name
        self.client = nfs_rs.Client.connect(f"nfs://127.0.0.1:{port}{pseudo}?version=4.1",
                                            operation_timeout=300)

    def write(self, name, size, block):
        with self.client.open(name, "wb") as f:
            for _ in range(size // len(block)):
                f.write(block)

    def read(self, name, size):
        # exact-size positional reads: nfs-rs's parallel READs past EOF upset Ganesha 4.3
        buf, total = bytearray(CALL), 0
        with self.client.open(name, "rb") as f:
            while total < size:
                view = memoryview(buf)[:min(CALL, size - total)]
                n = f.readinto_at(view, total)
                if not n:
                    break
                total += n
        return total

    def create(self, names):
        for n in names:
            self.client.touch(n)

    def stat(self, names):
        for n in names:
            self.client.stat(n)

    def delete(self, names):
        for n in names:
            self.client.unlink(n)

    def close(self):
        self.client.close()


def start_peer(base: str) -> tuple[subprocess.Popen, int, str]:
    """Ganesha by hand on a plain directory with the RECIPES config; returns (proc, port, dir)."""
    path, state = os.path.join(base, "peer"), os.path.join(base, "peer-state")
    os.makedirs(path)
    os.makedirs(state)
    port = free_port()
    conf = os.path.join(state, "ganesha.conf")
    with open(conf, "w") as f:
        f.write(PEER_CONF.format(port=port, state=state, path=path))
    proc = subprocess.Popen(["ganesha.nfsd", "-F", "-f", conf, "-L",
                             os.path.join(state, "log"), "-p", os.path.join(state, "pid")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 15
    while not nfs_null_ping("127.0.0.1", port):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError("the peer ganesha.nfsd did not start")
        time.sleep(0.05)
    return proc, port, path


def run_round(targets, size: int, files: int, block: bytes, results: dict) -> None:
    """One round: each workload runs on every target back to back (so a burst of load from
    elsewhere on the machine hits all of them alike); appends MB/s and ops/s to ``results``."""
    def timed(target, key, amount, fn, *args):
        t = time.perf_counter()
        fn(*args)
        rate = amount / (time.perf_counter() - t)
        results.setdefault(target.name, {}).setdefault(key, []).append(rate)

    for target in targets:
        timed(target, "write MB/s", size / MiB, target.write, "big.bin", size, block)
        drop_cache(os.path.join(target.dir, "big.bin"))
    for target in targets:
        timed(target, "read MB/s", size / MiB, check_read, target, size)
        os.unlink(os.path.join(target.dir, "big.bin"))
    names = [f"f{i:05d}" for i in range(files)]
    for op in ("create", "stat", "delete"):
        for target in targets:
            timed(target, f"{op} ops/s", files, getattr(target, op), names)


def check_read(target, size: int) -> None:
    """Read big.bin back and insist on every byte."""
    got = target.read("big.bin", size)
    assert got == size, f"{target.name}: read {got} of {size} bytes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    size, block = args.size_mib * MiB, os.urandom(CALL)
    base = tempfile.mkdtemp(prefix="strata-test-bench-")
    strata = peer = None
    targets = []
    try:
        local_dir = os.path.join(base, "local")
        os.makedirs(local_dir)
        strata_dir = os.path.join(base, "strata")
        os.makedirs(strata_dir)
        state = os.path.join(base, "strata-state")
        os.makedirs(state)
        strata = NfsServer(NfsSettings(state_dir=state, port=free_port(),
                                       bind_address="127.0.0.1"))
        strata.start([NfsExport(1, strata_dir, "/strata",
                                [NfsClientRule("127.0.0.1", "rw", "no_root_squash")])])
        peer, peer_port, peer_dir = start_peer(base)
        targets = [NfsTarget("strata", strata_dir, strata.settings.port, "/strata"),
                   NfsTarget("peer", peer_dir, peer_port, "/peer"),
                   LocalTarget(local_dir)]
        results: dict = {}
        for i in range(args.repeat):
            run_round(targets[i % 3:] + targets[:i % 3], size, args.files, block, results)
        report(results, args)
    finally:
        for target in targets:
            target.close()
        if strata:
            strata.stop()
        if peer and peer.poll() is None:
            peer.terminate()
            try:
                peer.wait(10)
            except subprocess.TimeoutExpired:
                peer.kill()
        shutil.rmtree(base, ignore_errors=True)


def report(results: dict, args) -> None:
    """Print medians and ratios (and the raw numbers with --json)."""
    medians = {t: {k: statistics.median(v) for k, v in r.items()} for t, r in results.items()}
    print(f"file bench: {args.size_mib} MiB, {args.files} files, {args.repeat} rounds, "
          "NFSv4.1 via nfs-rs, medians")
    print(f"{'workload':<14}{'strata':>10}{'peer':>10}{'local':>10}"
          f"{'strata/peer':>13}{'strata/local':>14}")
    for key in medians["strata"]:
        s, p, loc = medians["strata"][key], medians["peer"][key], medians["local"][key]
        print(f"{key:<14}{s:>10.1f}{p:>10.1f}{loc:>10.1f}{s / p:>13.2f}{s / loc:>14.3f}")
    if args.json:
        print(json.dumps({"medians": medians, "samples": results}, indent=1))


if __name__ == "__main__":
    main()
