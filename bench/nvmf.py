#!/usr/bin/env python3
"""NVMe-oF/TCP benchmark: a Strata spdk volume served by nvmf_tgt against the raw disk (the
limit) and against Strata's NBD and iSCSI exports, on the same disk.

Workloads, QD32, ``--runtime`` seconds each: 4 KiB random write and 128 KiB sequential read.

- limit: fio ``libaio``, O_DIRECT, on a raw file;
- NVMe-oF: a thin lvol of an spdk pool (an lvol store on an AIO bdev over an image file, as
  Strata makes it), written full first, exported by nvmf_tgt (interrupt mode, no hugepages)
  and driven by SPDK's ``spdk_nvme_perf`` over TCP on 127.0.0.1;
- NBD and iSCSI: Strata's qemu-storage-daemon and tgtd exports of raw files, driven by fio
  as in bench/block.py (iSCSI through qemu-storage-daemon's initiator).

Each path has its own fully written file of ``--size-mib`` under one
``/tmp/strata-test-bench-*`` directory (removed at the end). Every job runs ``--repeat``
times in a rotating order; medians are printed, with the serving process's CPU per I/O
(``/proc/<pid>/stat``), then nvmf_tgt's idle CPU and resident memory.

``--suite ceph`` (or ``all``) measures a volume of a Ceph pool instead (the development
cluster, started under the same directory: mon, mgr, 3 OSDs, replicated:3 over CRUSH hosts):
NVMe-oF through SPDK's rbd bdev (spdk_nvme_perf, the same QD32 workloads) against ``rbd
bench`` straight to the image (``--io-threads 32``, the same I/O size and pattern), and the
idle CPU and memory of an nvmf_tgt holding the image open (librados' threads).

    .venv/bin/python bench/nvmf.py [--size-mib 512] [--runtime 5] [--repeat 3]
                                   [--suite file|ceph|all] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.block import Procs, fill, fio, iscsi_via_nbd  # noqa: E402
from bench.ceph_rbd import rbd_bench  # noqa: E402
from dataplane import DeviceSpec  # noqa: E402
from dataplane.spdk.driver import SpdkDriver  # noqa: E402
from dataplane.spdk.target import SpdkTarget, initiator_config, run_app, spdk_binary  # noqa: E402
from plumbing.process import free_port  # noqa: E402
from services.block.transports import BlockRuntime, Host, HostGroup  # noqa: E402

MiB = 1 << 20
WORKLOADS = [("rand-write 4K", "randwrite", 4096), ("seq-read 128K", "read", 128 * 1024)]
INITIATOR = "iqn.2026-01.io.strata.bench:client"
SECRET = "bench-secret-01"
TICK = os.sysconf("SC_CLK_TCK")
PATHS = ("limit (fio on raw file)", "NVMe-oF (spdk)", "NBD", "iSCSI")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far (0 without one)."""
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run_spdk_app(argv: list, timeout: float) -> str:
    """An SPDK program's output (RuntimeError if it failed)."""
    done = run_app(argv, timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} failed: {done.stdout[-800:]}")
    return done.stdout


def perf(export: dict, rw: str, bs: int, runtime: int) -> dict:
    """spdk_nvme_perf at QD32 over NVMe/TCP; {"MBps", "iops"}."""
    r = (f"trtype:TCP adrfam:IPv4 traddr:{export['traddr']} trsvcid:{export['trsvcid']} "
         f"subnqn:{export['subsystem_nqn']}")
    out = run_spdk_app([spdk_binary("spdk_nvme_perf"), "--no-huge", "-s", "256", "-c", "0x2",
                        "-q", "32", "-o", str(bs), "-w", rw, "-t", str(runtime), "-r", r],
                       runtime + 120)
    m = re.search(r"^Total\s*:\s*([\d.]+)\s+([\d.]+)", out, re.M)
    if not m:
        raise RuntimeError(f"spdk_nvme_perf failed: {out[-800:]}")
    return {"MBps": float(m.group(2)) * MiB / 1e6, "iops": float(m.group(1))}


def fill_over_nvmf(export: dict, raw: Path, d: Path) -> None:
    """Write every byte of the volume (so the thin lvol has all its clusters) with spdk_dd."""
    config = initiator_config(export["traddr"], export["trsvcid"], export["subsystem_nqn"])
    (d / "fill.json").write_text(json.dumps(config))
    run_spdk_app([spdk_binary("spdk_dd"), "--no-huge", "-s", "256", "-m", "0x2",
                  "--disable-cpumask-locks", "--num-trace-entries", "0",
                  "--json", str(d / "fill.json"), f"--if={raw}", "--ob=remoten1", f"--bs={MiB}"],
                 900)


def idle_figures(pid: int, seconds: float = 5.0) -> dict:
    """nvmf_tgt's CPU (% of one core) over ``seconds`` of idleness and its resident memory."""
    before = cpu_seconds(pid)
    time.sleep(seconds)
    used = cpu_seconds(pid) - before
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text()
               .splitlines() if line.startswith("VmRSS:"))
    return {"idle_cpu_percent": 100 * used / seconds, "rss_mib": rss / 1024}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=512, help="size of each volume")
    ap.add_argument("--runtime", type=int, default=5, help="seconds per job")
    ap.add_argument("--repeat", type=int, default=3, help="runs per job (medians reported)")
    ap.add_argument("--json", action="store_true", help="also print the raw numbers as JSON")
    ap.add_argument("--suite", choices=("file", "ceph", "all"), default="file",
                    help="file: raw file, NBD, iSCSI; ceph: a Ceph pool's volume")
    args = ap.parse_args(argv)
    for tool in ("fio", "tgtd", "qemu-storage-daemon"):
        if not shutil.which(tool):
            print(f"needs {tool} (apt-get install fio tgt qemu-system-common)", file=sys.stderr)
            return 2
    if not spdk_binary("spdk_nvme_perf"):
        print("needs SPDK (scripts/build-spdk.sh)", file=sys.stderr)
        return 2
    if args.suite in ("ceph", "all"):
        ceph_suite(args)
    if args.suite in ("file", "all"):
        file_suite(args)
    return 0


def file_suite(args) -> None:
    """NVMe-oF on an spdk pool against fio on the raw file, NBD and iSCSI."""
    size = args.size_mib * MiB
    d = Path(tempfile.mkdtemp(prefix="strata-test-bench-nvmf-", dir="/tmp"))
    procs, rt, target, drv = Procs(), None, None, None
    try:
        files = {n: d / f"{n}.raw" for n in ("limit", "nbd", "iscsi", "source")}
        for path in files.values():
            fill(path, size)
        target = SpdkTarget(d / "nvmf").start()
        drv = SpdkDriver(d / "spdk", rpc_socket=str(target.rpc_socket), timeout=60)
        drv.create_pool("bench", [DeviceSpec(f"image:{args.size_mib + 64}M")])
        drv.create_volume("bench", "vol", size)
        export = drv.export_volume_nvmf("bench", "vol", trsvcid=free_port())
        fill_over_nvmf(export, files["source"], d)
        rt = BlockRuntime(d / "strata", iscsi_port=free_port(), nbd_port=free_port())
        rt.start()
        group = HostGroup("bench", hosts=[Host("client", iqn=INITIATOR, chap_user="bench",
                                               chap_secret=SECRET)])
        health = rt.health()
        servers = {"NVMe-oF (spdk)": target.pid, "NBD": health["nbd"]["pid"],
                   "iSCSI": health["iscsi"]["pid"], PATHS[0]: None}
        targets = {
            PATHS[0]: {"file": str(files["limit"])},
            "NBD": {"uri": rt.export("bench-nbd", "nbd", str(files["nbd"]))["uri"]},
            "iSCSI": iscsi_via_nbd(procs, d, "iscsi", rt.export(
                "bench-iscsi", "iscsi", str(files["iscsi"]), host_group=group), True),
        }
        runs: dict[str, dict[str, list]] = {}
        for rep in range(args.repeat):
            order = list(PATHS[rep % len(PATHS):] + PATHS[:rep % len(PATHS)])
            for label, rw, bs in WORKLOADS:
                for path in order:
                    cpu = cpu_seconds(servers[path])
                    r = (perf(export, rw, bs, args.runtime) if path == "NVMe-oF (spdk)"
                         else fio(targets[path], rw, str(bs), size, args.runtime))
                    ios = r["iops"] * args.runtime
                    r["cpu_us_per_io"] = (cpu_seconds(servers[path]) - cpu) * 1e6 / ios if ios else 0
                    runs.setdefault(path, {}).setdefault(label, []).append(r)
                    print(f"  run {rep + 1} {label:14} {path:24} {r['MBps']:9.1f} MB/s "
                          f"{r['iops']:9.0f} IOPS {r['cpu_us_per_io']:7.1f} us CPU/IO",
                          flush=True)
        idle = idle_figures(target.pid)
        results = {p: {label: {k: statistics.median(r[k] for r in rs)
                               for k in ("MBps", "iops", "cpu_us_per_io")}
                       for label, rs in per.items()} for p, per in runs.items()}
        print_table(results)
        print(f"\nnvmf_tgt idle: {idle['idle_cpu_percent']:.2f}% of a core, "
              f"{idle['rss_mib']:.0f} MiB resident")
        if args.json:
            print(json.dumps({"medians": results, "runs": runs, "idle": idle}, indent=2))
    finally:
        if rt is not None:
            rt.stop()
        procs.stop_all()
        if drv is not None:
            drv.rpc.close()
        if target is not None:
            target.stop()
        shutil.rmtree(d, ignore_errors=True)


CEPH_SIDES = ("rbd bench", "NVMe-oF (spdk rbd bdev)")


def ceph_suite(args) -> None:
    """NVMe-oF through SPDK's rbd bdev against rbd bench, on one image of a Ceph pool."""
    from dataplane.ceph.devcluster import DevCluster
    from dataplane.ceph.driver import CephDriver

    size = args.size_mib * MiB
    d = Path(tempfile.mkdtemp(prefix="strata-test-bench-nvmf-ceph-", dir="/tmp"))
    cluster, target, drv = None, None, None
    try:
        cluster = DevCluster(d / "cluster").up()
        conf, client = str(cluster.conf), cluster.client
        ceph = CephDriver(d / "ceph", ceph_conf=conf, client=client, pool_prefix="bench.")
        ceph.create_pool("bench", [], redundancy="replicated:3", failure_domain="host")
        vol = ceph.create_volume("bench", "disk", size)
        image = f"{ceph._load('bench')['rados_pool']}/disk"
        rbd_bench(conf, client, image, "write", "4M", "seq", size, 16)   # reads read data
        target = SpdkTarget(d / "nvmf").start()
        drv = SpdkDriver(d / "spdk", rpc_socket=str(target.rpc_socket), timeout=60)
        export = drv.export_rbd_nvmf(vol.path, traddr="127.0.0.1", trsvcid=free_port())
        idle = idle_figures(target.pid)
        runs: dict = {label: {side: [] for side in CEPH_SIDES} for label, _, _ in WORKLOADS}
        for rep in range(args.repeat):
            for label, rw, bs in WORKLOADS:
                io_type, pattern = ("write", "rand") if rw == "randwrite" else ("read", "seq")
                # rbd bench runs to a byte total: about the runtime at the rates seen here
                total = size // 16 if io_type == "write" else size
                sides = [(CEPH_SIDES[0], lambda: rbd_bench(
                             conf, client, image, io_type, f"{bs // 1024}K", pattern, total, 32)
                          / 1e6),
                         (CEPH_SIDES[1], lambda: perf(export, rw, bs, args.runtime)["MBps"])]
                for side, run in (sides if rep % 2 == 0 else sides[::-1]):
                    mbps = run()
                    runs[label][side].append(mbps)
                    print(f"  run {rep + 1} {label:14} {side:24} {mbps:9.1f} MB/s", flush=True)
        print(f"\n{'workload':14} {'rbd bench MB/s':>15} {'NVMe-oF MB/s':>13} {'ratio':>7}")
        for label, sides in runs.items():
            rbd_mbps, nvmf_mbps = (statistics.median(sides[s]) for s in CEPH_SIDES)
            print(f"{label:14} {rbd_mbps:15.1f} {nvmf_mbps:13.1f} {nvmf_mbps / rbd_mbps:6.2f}x")
        print(f"(medians of {args.repeat}; replicated:3 over 3 CRUSH hosts on one machine; "
              "aim >= 0.8x)")
        print(f"nvmf_tgt with the image open, idle: {idle['idle_cpu_percent']:.2f}% of a core, "
              f"{idle['rss_mib']:.0f} MiB resident")
        if args.json:
            print(json.dumps({"ceph_runs": runs, "ceph_idle": idle}, indent=2))
    finally:
        if drv is not None:
            drv.rpc.close()
        if target is not None:
            target.stop()
        if cluster is not None:
            cluster.destroy()
        shutil.rmtree(d, ignore_errors=True)


def print_table(results: dict) -> None:
    """Medians per path: throughput, IOPS, the serving process's CPU per I/O, and ratios."""
    limit, nvmf = results[PATHS[0]], results["NVMe-oF (spdk)"]
    print(f"\n{'workload':14} {'path':24} {'MB/s':>9} {'IOPS':>9} {'CPU us/IO':>10} "
          f"{'x limit':>8} {'NVMe-oF x':>10}")
    for label, _, _ in WORKLOADS:
        for path in PATHS:
            r = results[path][label]
            print(f"{label:14} {path:24} {r['MBps']:9.1f} {r['iops']:9.0f} "
                  f"{r['cpu_us_per_io']:10.1f} {r['MBps'] / limit[label]['MBps']:8.2f} "
                  f"{nvmf[label]['MBps'] / r['MBps']:10.2f}")


if __name__ == "__main__":
    sys.exit(main())
