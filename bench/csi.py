#!/usr/bin/env python3
"""CSI: CreateVolume to staged and published on a node, per protocol, median of ``--runs``.

The node is a TCG guest (services/csi/tests/guest_node.py: a Debian system with the kernel's
NFS, CephFS, iSCSI and NVMe/TCP clients, the node plugin reached over its network); the controller
runs on the host against a live `strata up` whose data services listen on the guest's side.
One run: CreateVolume, ControllerPublishVolume (for cephfs: a scoped cephx key made),
NodeStageVolume (an NFSv4.1 or kernel CephFS mount, or a login and a file system made on the
fresh volume), NodePublishVolume; the clock stops when the published path answers. Then
unpublish, unstage, delete (not timed). nvmeof needs the SPDK build (`--spdk on`); cephfs a
development Ceph cluster (tests/ceph.py, started here on 10.78.0.1, about 40 s, not timed);
each is left out without it.

    .venv/bin/python bench/csi.py [--runs 5] [--protocols nfs,cephfs] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.csi.proto import csi_pb2  # noqa: E402
from services.csi.tests.guest_node import (GuestNode, Mode, Staged, block_cap,  # noqa: E402
                                           mount_cap, rest)
from services.csi.tests.plugin import Plugin  # noqa: E402
from tests.appliance import Appliance  # noqa: E402
from tests.ceph import ceph_pool_body, ceph_unavailable, shared_cluster  # noqa: E402
from tests.guest import Image  # noqa: E402
from tests.kit import free_port  # noqa: E402
from tests.spdk_support import spdk_unavailable  # noqa: E402
from tests.vmhost import Netns  # noqa: E402

MiB = 1 << 20
CASES = {  # protocol: (capability, parameters)
    "nfs": (lambda: mount_cap(Mode.MULTI_NODE_MULTI_WRITER), {"protocol": "nfs"}),
    "iscsi": (mount_cap, {"protocol": "iscsi"}),
    "nvmeof": (block_cap, {"protocol": "nvmeof", "pool": "fast"}),
    "cephfs": (lambda: mount_cap(Mode.MULTI_NODE_MULTI_WRITER),
               {"protocol": "cephfs", "pool": "cephbench"}),
}


def measure(app, ctl, guest, runs: int, protocols) -> dict:
    with guest.channel() as ch:
        node = guest.node(ch)
        node_id = node.NodeGetInfo(csi_pb2.NodeGetInfoRequest(), timeout=30).node_id
        out = {}
        for protocol in protocols:
            cap, params = CASES[protocol]
            seconds = []
            for i in range(runs):
                start = time.monotonic()
                vol = Staged(ctl, node, node_id, f"bench-{protocol}-{i}", cap(), params,
                             size=32 * MiB)
                vol.controller_publish()
                vol.stage(guest)
                vol.publish()
                guest.sh(f"test -e {vol.target}")
                seconds.append(time.monotonic() - start)
                vol.unpublish_and_unstage()
                vol.delete()
            out[protocol] = {"median_s": round(statistics.median(seconds), 3),
                             "runs_s": [round(s, 3) for s in seconds]}
            print(f"{protocol:7} CreateVolume to published: median "
                  f"{out[protocol]['median_s'] * 1000:.0f} ms of {out[protocol]['runs_s']}",
                  flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--protocols", default=",".join(CASES),
                   help="comma-separated, of " + ", ".join(CASES))
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    spdk = spdk_unavailable() is None
    ceph = ceph_unavailable() is None
    protocols = [x for x in args.protocols.split(",") if x in CASES
                 and (spdk or x != "nvmeof") and (ceph or x != "cephfs")]
    work = Path(tempfile.mkdtemp(prefix="strata-test-bench-csi-"))
    image = Image.build(work / "image")
    with Netns() as netns:
        extra = ["--data-host", netns.host_ip]
        if spdk:
            extra += ["--spdk", "on", "--nvmf-port", str(free_port())]
        app = Appliance(pool_size="2G", extra_args=tuple(extra))
        plugin = guest = None
        try:
            app.start(timeout=300)
            if "cephfs" in protocols:
                rest(app, "POST", "pools/", ceph_pool_body(
                    shared_cluster(), "cephbench", redundancy="replicated:3",
                    failure_domain="host"))
            if spdk and "nvmeof" in protocols:
                rest(app, "POST", "pools/", {"name": "fast", "driver": "spdk",
                                             "devices": ["image:512M"]})
            (work / "ctl").mkdir()
            creds = app.credentials
            plugin = Plugin(work / "ctl", creds["api_url"], creds["token"],
                            mode="controller").start()
            guest = GuestNode(image, netns, work).start()
            print(f"guest booted and serving in {guest.boot_seconds:.1f} s", flush=True)
            with plugin.channel() as ch:
                result = measure(app, plugin.controller(ch), guest, args.runs, protocols)
            result["guest_boot_s"] = round(guest.boot_seconds, 1)
        finally:
            if guest:
                guest.stop()
            if plugin:
                plugin.stop()
            app.destroy()
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
