"""Running ansible/ for real against the cluster tests' nspawn hosts (tests/nodes.py)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.nodes import ROOT, Hosts

ANSIBLE = ROOT / "ansible"
BIN = Path(sys.executable).parent


def wheelhouse() -> str:
    """The wheelhouse of this checkout (built once per source state, cached)."""
    proc = subprocess.run([str(ROOT / "scripts/build-wheelhouse.sh")], capture_output=True,
                          text=True, timeout=1800, env={**os.environ, "PYTHON": sys.executable})
    if proc.returncode != 0:
        raise RuntimeError(f"build-wheelhouse.sh failed: {proc.stderr[-2000:]}")
    return proc.stdout.strip().splitlines()[-1]


def cluster_commands() -> bool:
    """Whether this checkout's CLI has the cluster commands (`strata plane`, `strata node`)
    the roles' join and agent steps run."""
    proc = subprocess.run([str(BIN / "strata"), "--help"], capture_output=True, text=True)
    return " plane" in proc.stdout and " node" in proc.stdout


def floating_address(host) -> str:
    """The node's floating data address on the bridge (its own address + 100: .111 for .11)."""
    return f"{host.address.rsplit('.', 1)[0]}.{host.index + 100}"


def write_inventory(hosts: Hosts, plane: list[str], nodes: list[str], wheels: str,
                    extra: dict | None = None) -> Path:
    """An inventory of the session's hosts (the ansible/inventory.example.ini layout), with
    ``extra`` variables for all (the Ceph client settings)."""
    h = hosts.hosts
    lines = ["[plane]"] + [f"{n} ansible_host={h[n].address} strata_plane_address={h[n].address}"
                           for n in plane]
    lines += ["", "[nodes]"] + [f"{n} ansible_host={h[n].address} "
                                f"floating_address={floating_address(h[n])}/24" for n in nodes]
    lines += ["", "[all:vars]", "ansible_user=root",
              f"ansible_ssh_private_key_file={hosts.key}",
              f"ansible_ssh_common_args='-o UserKnownHostsFile={hosts.known_hosts} "
              "-o StrictHostKeyChecking=yes'",
              f"strata_cluster_network={hosts.subnet}.0/24", f"strata_wheelhouse={wheels}"]
    lines += [f"{key}={value}" for key, value in (extra or {}).items()]
    path = hosts.folder / "inventory" / "hosts.ini"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Run:
    """One ansible-playbook run: its exit code, output, seconds, and per host the recap's
    counts (``recap["node1"]["changed"]``)."""
    returncode: int
    output: str
    seconds: float
    recap: dict

    def changed(self) -> dict:
        return {host: counts["changed"] for host, counts in self.recap.items()}


def playbook(inventory: Path, name: str = "site.yml", *args: str, timeout: float = 1200) -> Run:
    """Run ``ansible/<name>`` with ``inventory``; raises with the output's tail on failure."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_LOCAL_TEMP": str(inventory.parent / "tmp"),
           "ANSIBLE_SSH_CONTROL_PATH_DIR": str(inventory.parent / "cp"),
           "PATH": f"{BIN}:{os.environ['PATH']}"}
    if not cluster_commands():
        args = (*args, "--skip-tags", "strata-cluster")
    start = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), name, *args],
                          cwd=ANSIBLE, capture_output=True, text=True, env=env, timeout=timeout)
    run = Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start,
              _recap(proc.stdout))
    if proc.returncode != 0:
        raise AssertionError(f"ansible-playbook {name} failed ({proc.returncode}):\n"
                             f"{run.output[-6000:]}")
    return run


def _recap(output: str) -> dict:
    recap = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        recap[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return recap
