#!/usr/bin/env python3
"""Block benchmark: Strata's iSCSI LUN and NBD export against the same daemons set up by
hand (the peers) and fio on the raw file (the limit), all on the same disk.

Workloads (fio, QD32, ``--runtime`` seconds each): 1 MiB sequential write and read,
4 KiB random read and write.

- limit: fio ``libaio``, O_DIRECT, on a raw file;
- NBD: fio's ``nbd`` engine against a Strata ``QemuStorageDaemon`` export and against
  ``qemu-storage-daemon`` started by hand with the recipe's command line (file
  aio=native, cache.direct=on, raw, nbd export);
- iSCSI: a Strata ``TgtdTarget`` LUN (host group ACL + CHAP) and a tgtd configured by
  hand with ``tgtadm`` (ACL ALL, no CHAP). fio has no iSCSI engine here, so both are
  read through the same client path: qemu-storage-daemon as the iSCSI initiator,
  re-exported on a unix NBD socket to fio's ``nbd`` engine.

Every volume is a separate, fully written raw file under one
``/tmp/strata-test-bench-*`` directory, removed at the end. Each job runs ``--repeat``
times in a rotating order; medians are reported. Prints a table and (``--json``) the
numbers. Ratios: Strata / peer (aim >= 0.95) and Strata / limit.

    .venv/bin/python bench/block.py [--size-mib 1024] [--runtime 5] [--repeat 3]
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

from services.block.transports import BlockRuntime, Host, HostGroup  # noqa: E402
from plumbing.process import free_port, wait_for_port  # noqa: E402

MiB = 1 << 20
WORKLOADS = [("seq-write 1M", "write", "1M"), ("seq-read 1M", "read", "1M"),
             ("rand-read 4K", "randread", "4k"), ("rand-write 4K", "randwrite", "4k")]
INITIATOR = "iqn.2026-01.io.strata.bench:client"
SECRET = "bench-secret-01"


def fill(path: Path, size: int) -> None:
    """Write every byte (so reads hit allocated blocks and writes do not allocate)."""
    block = os.urandom(MiB)
    with open(path, "wb") as f:
        for _ in range(size // MiB):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())


def fio(target: dict, rw: str, bs: str, size: int, runtime: int) -> dict:
    """Run one fio job at QD32; return {"MBps", "iops"}."""
    argv = ["fio", "--name=bench", f"--rw={rw}", f"--bs={bs}", "--iodepth=32",
            f"--size={size}", f"--runtime={runtime}", "--time_based", "--numjobs=1",
            "--group_reporting", "--output-format=json", "--randrepeat=0"]
    if "uri" in target:
        argv += ["--ioengine=nbd", f"--uri={target['uri']}"]
    else:
        argv += ["--ioengine=libaio", "--direct=1", f"--filename={target['file']}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=runtime + 120)
    if out.returncode != 0:
        raise RuntimeError(f"fio failed: {out.stderr.strip() or out.stdout[-500:]}")
    job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]   # nbd engine chats first
    side = job["write"] if "write" in rw else job["read"]
    return {"MBps": side["bw_bytes"] / 1e6, "iops": side["iops"]}


class Procs:
    """Processes started by hand for the peers; stopped by PID at the end."""

    def __init__(self):
        self.items: list[tuple[subprocess.Popen, list]] = []

    def start(self, argv: list[str], log: Path, stop_argv: list | None = None):
        with open(log, "ab") as f:
            p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.items.append((p, stop_argv or []))
        return p

    def stop_all(self):
        for p, stop_argv in reversed(self.items):
            for argv in stop_argv:
                subprocess.run(argv, capture_output=True)
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def peer_qsd(procs: Procs, d: Path, raw: Path) -> dict:
    """qemu-storage-daemon by hand, as in RECIPES.md (raw instead of qcow2)."""
    port = free_port()
    procs.start(["qemu-storage-daemon",
                 "--blockdev", f"driver=file,node-name=file0,filename={raw},aio=native,"
                               "cache.direct=on",
                 "--blockdev", "driver=raw,node-name=disk0,file=file0",
                 "--nbd-server", f"addr.type=inet,addr.host=127.0.0.1,addr.port={port}",
                 "--export", "type=nbd,id=exp0,node-name=disk0,name=disk0,writable=on"],
                d / "peer-qsd.log")
    assert wait_for_port("127.0.0.1", port), "peer qemu-storage-daemon did not start"
    return {"uri": f"nbd://127.0.0.1:{port}/disk0"}


def peer_tgtd(procs: Procs, d: Path, raw: Path) -> dict:
    """tgtd by hand with tgtadm (ACL ALL)."""
    port, cport = free_port(), 32600 + os.getpid() % 100
    adm = ["tgtadm", "-C", str(cport), "--lld", "iscsi"]
    procs.start(["tgtd", "-f", "-C", str(cport), "--iscsi", f"portal=127.0.0.1:{port}"],
                d / "peer-tgtd.log",
                [adm + ["--op", "delete", "--mode", "target", "--tid", "1", "--force"],
                 adm + ["--op", "delete", "--mode", "system"]])
    for _ in range(100):
        if subprocess.run(adm + ["--op", "show", "--mode", "sys"],
                          capture_output=True).returncode == 0:
            break
        time.sleep(0.05)
    iqn = "iqn.2026-01.io.strata.bench:peer"
    for args in (["--op", "new", "--mode", "target", "--tid", "1", "-T", iqn],
                 ["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1",
                  "-b", str(raw), "--bstype", "rdwr"],
                 ["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"]):
        subprocess.run(adm + args, check=True, capture_output=True)
    assert wait_for_port("127.0.0.1", port), "peer tgtd did not start"
    return {"portal": f"127.0.0.1:{port}", "target_iqn": iqn, "lun": 1}


def iscsi_via_nbd(procs: Procs, d: Path, name: str, info: dict, auth: bool) -> dict:
    """qemu-storage-daemon as the iSCSI initiator, re-exported on a unix NBD socket."""
    sock = d / f"{name}.nbd.sock"
    opts = (f"driver=iscsi,node-name=n0,transport=tcp,portal={info['portal']},"
            f"target={info['target_iqn']},lun={info['lun']},initiator-name={INITIATOR}")
    secret = []
    if auth:
        opts += ",user=bench,password-secret=sec0"
        secret = ["--object", f"secret,id=sec0,data={SECRET}"]
    procs.start(["qemu-storage-daemon", *secret, "--blockdev", opts,
                 "--nbd-server", f"addr.type=unix,addr.path={sock}",
                 "--export", "type=nbd,id=e0,node-name=n0,name=lun,writable=on"],
                d / f"{name}.client.log")
    for _ in range(200):
        if sock.exists():
            break
        time.sleep(0.05)
    else:
        log = (d / f"{name}.client.log").read_text(errors="replace")[-1000:]
        raise RuntimeError(f"iSCSI client for {name} did not start: {log}")
    return {"uri": f"nbd+unix:///lun?socket={sock}"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="size of each volume file")
    ap.add_argument("--runtime", type=int, default=5, help="seconds per fio job")
    ap.add_argument("--repeat", type=int, default=3, help="runs per job (medians reported)")
    ap.add_argument("--json", action="store_true", help="also print the raw numbers as JSON")
    args = ap.parse_args(argv)
    for tool in ("fio", "tgtd", "tgtadm", "qemu-storage-daemon"):
        if not shutil.which(tool):
            print(f"needs {tool} (apt-get install fio tgt qemu-system-common)", file=sys.stderr)
            return 2
    size = args.size_mib * MiB
    d = Path(tempfile.mkdtemp(prefix="strata-test-bench-", dir="/tmp"))
    procs = Procs()
    rt = None
    try:
        files = {n: d / f"{n}.raw" for n in ("limit", "strata-nbd", "peer-nbd",
                                              "strata-iscsi", "peer-iscsi")}
        for path in files.values():
            fill(path, size)
        rt = BlockRuntime(d / "strata", iscsi_port=free_port(), nbd_port=free_port())
        rt.start()
        group = HostGroup("bench", hosts=[Host("client", iqn=INITIATOR, chap_user="bench",
                                               chap_secret=SECRET)])
        targets = {
            "limit (fio on raw file)": {"file": str(files["limit"])},
            "Strata NBD": {"uri": rt.export("bench-nbd", "nbd", str(files["strata-nbd"]))["uri"]},
            "peer qemu-storage-daemon": peer_qsd(procs, d, files["peer-nbd"]),
            "Strata iSCSI": iscsi_via_nbd(procs, d, "strata-iscsi", rt.export(
                "bench-iscsi", "iscsi", str(files["strata-iscsi"]), host_group=group), True),
            "peer tgtd": iscsi_via_nbd(procs, d, "peer-iscsi",
                                       peer_tgtd(procs, d, files["peer-iscsi"]), False),
        }
        runs: dict[str, dict[str, list]] = {}
        pairs = [["Strata NBD", "peer qemu-storage-daemon"], ["Strata iSCSI", "peer tgtd"]]
        for rep in range(args.repeat):
            # each Strata path runs right next to its peer, first and second in turn
            order = ["limit (fio on raw file)"] + [t for pair in pairs
                                                   for t in (pair if rep % 2 == 0 else pair[::-1])]
            for label, rw, bs in WORKLOADS:
                for tname in order:
                    r = fio(targets[tname], rw, bs, size, args.runtime)
                    runs.setdefault(tname, {}).setdefault(label, []).append(r)
                    print(f"  run {rep + 1} {label:14} {tname:26} {r['MBps']:9.1f} MB/s "
                          f"{r['iops']:10.0f} IOPS", flush=True)
        results = {t: {label: {k: statistics.median(r[k] for r in rs) for k in ("MBps", "iops")}
                       for label, rs in per.items()} for t, per in runs.items()}
        print_table(results, runs)
        if args.json:
            print(json.dumps({"medians": results, "runs": runs}, indent=2))
    finally:
        if rt is not None:
            rt.stop()
        procs.stop_all()
        shutil.rmtree(d, ignore_errors=True)
    return 0


def paired_ratio(runs: dict, ours: str, peer: str, label: str) -> float:
    """Median over repeats of Strata/peer measured back to back (robust on a noisy host)."""
    return statistics.median(o["MBps"] / p["MBps"]
                             for o, p in zip(runs[ours][label], runs[peer][label]))


def print_table(results: dict, runs: dict) -> None:
    """Medians per path; "x peer" is the median of back-to-back Strata/peer ratios."""
    limit = results["limit (fio on raw file)"]
    print(f"\n{'workload':14} {'path':14} {'Strata MB/s':>12} {'peer MB/s':>10} "
          f"{'x peer':>7} {'limit MB/s':>11} {'x limit':>8}")
    for label, _, _ in WORKLOADS:
        for ours, peer in (("Strata NBD", "peer qemu-storage-daemon"),
                           ("Strata iSCSI", "peer tgtd")):
            o, p, lim = results[ours][label], results[peer][label], limit[label]
            print(f"{label:14} {ours[7:]:14} {o['MBps']:12.1f} {p['MBps']:10.1f} "
                  f"{paired_ratio(runs, ours, peer, label):7.2f} {lim['MBps']:11.1f} "
                  f"{o['MBps'] / lim['MBps']:8.2f}")


if __name__ == "__main__":
    sys.exit(main())
