#!/usr/bin/env python3
"""Cluster deployment benchmark: how long Ansible takes to deploy a plane and three nodes
from the cached Debian root, to re-run with nothing to do, and to add a fourth node
(``--limit``); and the resident memory of an idle node.

The hosts are the cluster tests' systemd-nspawn nodes (tests/nodes.py), booted fresh from
the cached root (an overlay each), reached over ssh by ansible-playbook with ansible/'s
site.yml. The root (scripts/build-debian-root.sh) and the wheelhouse
(scripts/build-wheelhouse.sh) are built before the clock starts, as in the tests.

Memory: the proportional set size (PSS) of every process in a node's cgroup, after the
deployment settles (``--settle`` seconds): the whole node (its systemd, journald, sshd,
and what the roles run) and the part that is Strata (processes under /opt/strata). Medians
over the nodes. Prints a table and (``--json``) the numbers.

    .venv/bin/python bench/cluster_deploy.py [--settle 20] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.ansible_support import cluster_commands, playbook, wheelhouse, write_inventory  # noqa: E402
from tests.nodes import Hosts, debian_root, unavailable  # noqa: E402

NODES = ["node1", "node2", "node3"]


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def node_memory(cgroup: Path) -> tuple[float, float]:
    """(whole node, Strata's processes) PSS in MiB."""
    total = strata = 0
    for procs in cgroup.rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            kib = pss_kib(int(pid))
            total += kib
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"/opt/strata/" in cmd:
                strata += kib
    return total / 1024, strata / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settle", type=float, default=20, help="idle seconds before memory")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    why = unavailable()
    if why:
        print(f"cluster_deploy: {why}", file=sys.stderr)
        return 1
    root, wheels = debian_root(), wheelhouse()
    hosts = Hosts(root).start()
    result = {"cluster_commands": cluster_commands()}
    try:
        start = time.monotonic()
        for name in ["plane1", *NODES]:
            hosts.add(name)
        result["boot_4_hosts_s"] = time.monotonic() - start
        inventory = write_inventory(hosts, ["plane1"], NODES, wheels)
        result["deploy_plane_3_nodes_s"] = playbook(inventory).seconds
        again = playbook(inventory)
        result["second_run_s"] = again.seconds
        result["second_run_changed"] = sum(again.changed().values())
        start = time.monotonic()
        hosts.add("node4")
        boot = time.monotonic() - start
        inventory = write_inventory(hosts, ["plane1"], [*NODES, "node4"], wheels)
        result["add_node_s"] = playbook(inventory, "site.yml", "--limit", "plane,node4").seconds
        result["add_node_boot_s"] = boot
        time.sleep(args.settle)
        mem = [node_memory(hosts.hosts[n].cgroup) for n in [*NODES, "node4"]]
        result["idle_node_pss_mib_median"] = statistics.median(m[0] for m in mem)
        result["idle_node_strata_pss_mib_median"] = statistics.median(m[1] for m in mem)
        result["plane_pss_mib"] = node_memory(hosts.hosts["plane1"].cgroup)[0]
    finally:
        hosts.close()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key:36} {value:.1f}" if isinstance(value, float) else f"{key:36} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
