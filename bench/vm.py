#!/usr/bin/env python3
"""VM benchmark: sequential dd inside a real guest (QEMU, TCG) on a Strata volume attached
with the recipe the API gives (NBD, vhost-user-blk, iSCSI with CHAP), as a ratio to the same
dd on a local raw image file attached to the same guest in the same boot.

TCG makes absolute figures meaningless (the guest's CPU is emulated), so only the ratios
matter; aims: vhost-user-blk >= 0.8, NBD >= 0.7, iSCSI >= 0.5. Each boot has two disks, the
local image (serial ``local``) and the Strata export; the guest runs ``dd bs=1M`` with
O_DIRECT, writes then reads, on each disk in turn, ``--repeat`` times (the order alternates)
and prints each run's seconds from its uptime clock. Every volume is a fully written raw
file under one ``/tmp/strata-test-bench-*`` directory, removed at the end; the daemons and
guests are stopped by PID.

    .venv/bin/python bench/vm.py [--size-mib 64] [--repeat 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from plumbing.process import free_port  # noqa: E402
from services.block.attach import Client, recipe  # noqa: E402
from services.block.transports import BlockRuntime, Host, HostGroup  # noqa: E402
from tests import guest  # noqa: E402

MiB = 1 << 20
INITIATOR = "iqn.2026-01.io.strata.bench:vm"
SECRET = "bench-secret-02"
AIMS = {"vhost-user-blk": 0.8, "nbd": 0.7, "iscsi": 0.5}
# /dev/vdX of each disk: the local image has serial "local"; the export is the other one
SCRIPT = """set -e
for d in /sys/block/vd*; do
  if [ "$(cat $d/serial 2>/dev/null)" = local ]; then local=/dev/${{d##*/}}; else strata=/dev/${{d##*/}}; fi
done
run() {{  # name op dev
  t0=$(cut -d' ' -f1 /proc/uptime)
  if [ $2 = write ]; then
    dd if=/dev/zero of=$3 bs=1M count={mib} oflag=direct conv=fsync 2>/dev/null
  else
    dd if=$3 of=/dev/null bs=1M count={mib} iflag=direct 2>/dev/null
  fi
  echo "RUN $1 $2 $t0 $(cut -d' ' -f1 /proc/uptime)"
}}
i=0
while [ $i -lt {repeat} ]; do
  for op in write read; do
    if [ $((i % 2)) = 0 ]; then run local $op $local; run strata $op $strata
    else run strata $op $strata; run local $op $local; fi
  done
  i=$((i + 1))
done
"""


def fill(path: Path, size: int) -> None:
    """Every byte written, so reads hit allocated blocks (NBD answers holes without I/O)."""
    block = os.urandom(MiB)
    with open(path, "wb") as f:
        for _ in range(size // MiB):
            f.write(block)
        os.fsync(f.fileno())


def measure(image: guest.Image, workdir: Path, local: Path, attach: dict, mib: int,
            repeat: int) -> dict:
    """One boot with the local image and the export; {(disk, op): [MB/s, ...]}."""
    initrd = image.initrd_with(SCRIPT.format(mib=mib, repeat=repeat), tag=attach["protocol"])
    memory = 512
    argv = image.boot_args(initrd, memory) + [
        "-drive", f"file={local},if=none,id=local,format=raw,cache=none,aio=native",
        "-device", "virtio-blk-pci,drive=local,serial=local", *attach["qemu"]["args"]]
    with guest.Boot(argv, workdir / f"{attach['protocol']}.log", timeout=1800) as vm:
        out = vm.wait()
    runs: dict = {}
    for line in out.splitlines():
        if line.startswith("RUN "):
            _, disk, op, t0, t1 = line.split()
            runs.setdefault((disk, op), []).append(mib * MiB / 1e6 / max(float(t1) - float(t0),
                                                                         0.01))
    return runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=64, help="bytes each dd moves (MiB)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per disk and op (medians)")
    ap.add_argument("--json", action="store_true", help="also print the raw numbers as JSON")
    args = ap.parse_args(argv)
    why = guest.missing()
    if why:
        print(f"bench/vm.py needs {why}", file=sys.stderr)
        return 1
    d = Path(tempfile.mkdtemp(prefix="strata-test-bench-vm-"))
    rt = None
    results = {}
    try:
        image = guest.Image.build(d / "guest")
        size = (args.size_mib + 8) * MiB
        files = {name: d / f"{name}.raw" for name in ("local", "nbd", "vhost-user-blk", "iscsi")}
        for path in files.values():
            fill(path, size)
        rt = BlockRuntime(d / "strata", iscsi_port=free_port(), nbd_port=free_port())
        rt.start()
        group = HostGroup("vms", hosts=[Host("hv", iqn=INITIATOR, chap_user="hv",
                                             chap_secret=SECRET)])
        (d / "chap").write_text(SECRET)
        for protocol in ("vhost-user-blk", "nbd", "iscsi"):
            conn = rt.export(f"bench-{protocol}", protocol, str(files[protocol]),
                             host_group=group if protocol == "iscsi" else None)
            client = Client("hv", iqn=INITIATOR, chap_user="hv") if protocol == "iscsi" else None
            attach = recipe({"export_id": f"bench-{protocol}", "protocol": protocol,
                             "volume": protocol, "connection": conn}, client)
            if attach["libvirt"]["secret"]:     # the recipe's setup: the secret in a file
                attach["qemu"]["args"] = [a.replace(attach["libvirt"]["secret"]["file"],
                                                    str(d / "chap"))
                                          for a in attach["qemu"]["args"]]
            runs = measure(image, d, files["local"], attach, args.size_mib, args.repeat)
            results[protocol] = {f"{disk} {op}": statistics.median(v)
                                 for (disk, op), v in sorted(runs.items())}
    finally:
        if rt is not None:
            rt.stop()
        shutil.rmtree(d, ignore_errors=True)

    print(f"guest dd bs=1M O_DIRECT, {args.size_mib} MiB, median of {args.repeat} (MB/s; TCG)")
    print(f"{'export':16} {'op':6} {'local':>8} {'Strata':>8} {'ratio':>6}  aim")
    for protocol, r in results.items():
        for op in ("write", "read"):
            ratio = r[f"strata {op}"] / r[f"local {op}"]
            print(f"{protocol:16} {op:6} {r[f'local {op}']:8.1f} {r[f'strata {op}']:8.1f} "
                  f"{ratio:6.2f}  >= {AIMS[protocol]}")
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
