"""Real hosts for the cluster tests: systemd-nspawn containers booted with systemd as PID 1.

Each host is an overlay on the Debian root `scripts/build-debian-root.sh` builds once per
machine, booted in its own network namespace whose veth joins one bridge on a private /24
(the host side of the bridge is .1), with its own hostname, machine id and ssh host keys, and
reached over ssh with a key made for the session. Traps of ../shared/RECIPES.md "Nodes of a
cluster on one machine" handled here:

- each nspawn starts inside its own cgroup (under /sys/fs/cgroup/unified), or the nodes'
  systemds would share one ``payload`` cgroup and see each other's processes;
- a crash is ``cgroup.kill`` of that cgroup plus the veth taken down (``kill -9`` of the
  nspawn process leaves the node's systemd and sshd alive);
- a node keeps its MAC across restarts (the peers' ARP caches);
- ``--register=no --keep-unit`` (there is no system bus on this machine);
- apt inside the nodes goes through a proxy on the bridge that passes only the mirror.

Everything made is recorded in ``hosts.json`` in the session's ``/tmp/strata-test-hosts-*``
folder before it is made, so that tests/cleanup_leftovers.py can tear down what a crashed
run left (`teardown_recorded`).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.ceph import CEPH_ADDRESS

ROOT = Path(__file__).resolve().parent.parent
SUBNET = "10.77.0"                     # private: only these tests use it
BRIDGE = "strata-br77"
# the hosts of the Ceph group's cluster tests (test_ceph_cluster_deploy.py): a bridge of their
# own, since that group runs beside the cluster group's session (tests/parallel.py)
CEPH_SUBNET = "10.79.0"
CEPH_BRIDGE = "strata-br79"
CGROUP_BASE = Path("/sys/fs/cgroup/unified")


def _run(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def unavailable() -> str | None:
    """Why these hosts cannot run here, or None."""
    if os.geteuid() != 0:
        return "cluster hosts need root (namespaces, overlays, nspawn)"
    for tool in ("systemd-nspawn", "ssh", "ssh-keygen", "ip"):
        if not shutil.which(tool):
            return f"cluster hosts need {tool}"
    if not (CGROUP_BASE / "cgroup.procs").exists():
        return f"cluster hosts need a cgroup2 tree at {CGROUP_BASE}"
    return None


def debian_root() -> Path:
    """The cached Debian root (built on first use, about 4 minutes; a flock makes concurrent
    callers wait for one build)."""
    proc = _run(str(ROOT / "scripts/build-debian-root.sh"), timeout=1800)
    return Path(proc.stdout.strip().splitlines()[-1])


@dataclass
class Host:
    """One nspawn node: ``name`` is its hostname, ``address`` its bridge address."""
    name: str
    index: int
    address: str
    folder: Path
    netns: str
    veth: str
    mac: str
    machine_id: str
    cgroup: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def merged(self) -> Path:
        return self.folder / "merged"


class Hosts:
    """The bridge, the apt proxy and the nspawn nodes of one test session."""

    def __init__(self, root: Path, folder: Path | None = None, subnet: str = SUBNET,
                 bridge: str = BRIDGE):
        self.root, self.subnet, self.bridge_name = root, subnet, bridge
        self.folder = folder or Path(tempfile.mkdtemp(prefix="strata-test-hosts-"))
        self.tag = self.folder.name.rsplit("-", 1)[-1][:6]
        self.cgroup = CGROUP_BASE / self.folder.name
        self.hosts: dict[str, Host] = {}
        self.key = self.folder / "id_ed25519"
        self.known_hosts = self.folder / "known_hosts"
        self.gateway = f"{subnet}.1"
        self.proxy = None
        self.bridge = None                 # set once this session made it
        self._record()

    # -- what is made, for cleanup_leftovers -------------------------------------------------
    def _record(self) -> None:
        state = {"bridge": self.bridge, "cgroup": str(self.cgroup),
                 "hosts": {h.name: {"netns": h.netns, "veth": h.veth, "cgroup": str(h.cgroup),
                                    "merged": str(h.merged)} for h in self.hosts.values()}}
        tmp = self.folder / "hosts.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.folder / "hosts.json")

    # -- the bridge --------------------------------------------------------------------------
    def start(self) -> "Hosts":
        from tests.apt_proxy import AptProxy

        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "strata-cluster-tests",
             "-f", str(self.key))
        self.cgroup.mkdir(exist_ok=True)
        if _run("ip", "link", "show", self.bridge_name, check=False).returncode == 0:
            raise RuntimeError(f"bridge {self.bridge_name} exists: another cluster test session is running "
                               "(or a crashed one left it: python tests/cleanup_leftovers.py)")
        self.bridge = self.bridge_name
        self._record()
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        self.proxy = AptProxy(self.gateway)
        return self

    # -- hosts -------------------------------------------------------------------------------
    def add(self, name: str) -> Host:
        """Make host ``name`` (overlay, namespace, veth, address) and boot it; returns when
        its ssh answers."""
        index = len(self.hosts) + 10
        host = Host(name=name, index=index, address=f"{self.subnet}.{index}",
                    folder=self.folder / name, netns=f"st-{self.tag}-{name}"[:32],
                    veth=f"st{self.tag}{index}"[:15], mac=f"02:{self.subnet.split('.')[1]}:00:00:00:{index:02x}",
                    machine_id=uuid.uuid4().hex, cgroup=self.cgroup / name)
        self.hosts[name] = host
        self._record()
        for sub in ("upper", "work", "merged"):
            (host.folder / sub).mkdir(parents=True)
        _run("mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={self.root},upperdir={host.folder}/upper,workdir={host.folder}/work",
             str(host.merged))
        self._write_identity(host)
        _run("ip", "netns", "add", host.netns)
        _run("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0",
             "netns", host.netns)
        _run("ip", "link", "set", host.veth, "master", self.bridge, "up")
        ns = ("ip", "-n", host.netns)
        _run(*ns, "link", "set", "eth0", "address", host.mac)
        _run(*ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _run(*ns, "link", "set", "eth0", "up")
        _run(*ns, "link", "set", "lo", "up")
        # the session's Ceph cluster listens on this host's CEPH_ADDRESS (tests/ceph.py)
        _run(*ns, "route", "add", f"{CEPH_ADDRESS}/32", "via", self.gateway)
        self.boot(host)
        return host

    def _write_identity(self, host: Host) -> None:
        etc = host.merged / "etc"
        (etc / "hostname").write_text(host.name + "\n")
        lines = ["127.0.0.1 localhost", f"{self.gateway} controller"]
        lines += [f"{h.address} {h.name}" for h in self.hosts.values()]
        (etc / "hosts").write_text("\n".join(lines) + "\n")
        ssh = host.merged / "root/.ssh"
        ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
        (ssh / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (ssh / "authorized_keys").chmod(0o600)
        (etc / "apt/apt.conf.d/80strata-proxy").write_text(
            f'Acquire::http::Proxy "{self.proxy.url}";\nAcquire::https::Proxy "DIRECT";\n')
        # sshd answers quickly without DNS (there is none on the bridge)
        (etc / "ssh/sshd_config.d").mkdir(exist_ok=True)
        (etc / "ssh/sshd_config.d/strata-tests.conf").write_text("UseDNS no\n")

    def boot(self, host: Host) -> None:
        """Start (or restart after a crash) the node's systemd in its own cgroup."""
        host.cgroup.mkdir(exist_ok=True)
        procs = str(host.cgroup / "cgroup.procs")

        def own_cgroup():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        log = open(host.folder / "console.log", "ab")
        host.proc = subprocess.Popen(
            ["systemd-nspawn", "-b", "--register=no", "--keep-unit", "-q",
             "-D", str(host.merged), "-M", host.name, f"--uuid={host.machine_id}",
             f"--network-namespace-path=/run/netns/{host.netns}", "--console=passive",
             "--capability=CAP_NET_ADMIN", "--bind=/dev/fuse"],   # the plane's ceph-fuse
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=own_cgroup)
        log.close()
        _run("ip", "link", "set", host.veth, "up")
        self.wait_ssh(host)

    def ssh_command(self, host: Host) -> list[str]:
        return ["ssh", "-i", str(self.key), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
                "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=accept-new", f"root@{host.address}"]

    def ssh(self, host: Host | str, command: str, check: bool = True,
            timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ``command`` on the host over ssh."""
        host = self.hosts[host] if isinstance(host, str) else host
        return _run(*self.ssh_command(host), command, check=check, timeout=timeout)

    def wait_ssh(self, host: Host, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if host.proc is not None and host.proc.poll() is not None:
                log = (host.folder / "console.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{host.name}: systemd-nspawn exited "
                                   f"({host.proc.returncode}):\n{log}")
            try:
                proc = self.ssh(host, "systemctl is-system-running --wait", check=False,
                                timeout=60)
            except subprocess.TimeoutExpired:
                continue
            if proc.returncode == 0 or proc.stdout.strip() in ("running", "degraded"):
                return
            last = proc.stderr.strip() or proc.stdout.strip()
            time.sleep(0.5)
        raise RuntimeError(f"{host.name}: no ssh within {timeout:.0f} s: {last}")

    def crash(self, host: Host | str) -> None:
        """A host crash: every process of the node killed at once, its link down."""
        host = self.hosts[host] if isinstance(host, str) else host
        _run("ip", "link", "set", host.veth, "down")
        _kill_cgroup(host.cgroup)
        if host.proc is not None:
            host.proc.wait(timeout=30)

    # -- teardown ----------------------------------------------------------------------------
    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        teardown_recorded(self.folder)


def _kill_cgroup(cgroup: Path, timeout: float = 30) -> None:
    """Kill every process in ``cgroup`` and its children, then remove the cgroups."""
    if not cgroup.exists():
        return
    (cgroup / "cgroup.kill").write_text("1")
    deadline = time.monotonic() + timeout
    while "populated 1" in (cgroup / "cgroup.events").read_text():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{cgroup}: processes left after cgroup.kill")
        time.sleep(0.05)
    for sub in sorted((p for p in cgroup.rglob("*") if p.is_dir()),
                      key=lambda p: -len(p.parts)):
        sub.rmdir()
    cgroup.rmdir()


def teardown_recorded(folder: Path) -> list[str]:
    """Tear down what ``folder/hosts.json`` records (nodes' processes, overlays, namespaces,
    the bridge) and remove the folder; returns what was done. Used by the session's teardown
    and by tests/cleanup_leftovers.py."""
    done = []
    try:
        state = json.loads((folder / "hosts.json").read_text())
    except (OSError, ValueError):
        state = {"hosts": {}}
    for name, host in state.get("hosts", {}).items():
        cgroup = Path(host["cgroup"])
        if cgroup.exists():
            _kill_cgroup(cgroup)
            done.append(f"killed host {name}")
        if subprocess.run(["mountpoint", "-q", host["merged"]]).returncode == 0:
            _run("umount", host["merged"], check=False)
            done.append(f"unmounted {host['merged']}")
        if _run("ip", "netns", "delete", host["netns"], check=False).returncode == 0:
            done.append(f"deleted netns {host['netns']}")
        if _run("ip", "link", "delete", host["veth"], check=False).returncode == 0:
            done.append(f"deleted {host['veth']}")
    cgroup = Path(state.get("cgroup", "/nonexistent"))
    if cgroup.exists():
        _kill_cgroup(cgroup)
    if state.get("bridge") and _run("ip", "link", "delete", state["bridge"],
                                    check=False).returncode == 0:
        done.append(f"deleted bridge {state['bridge']}")
    shutil.rmtree(folder, ignore_errors=True)
    return done


@contextmanager
def hosts_on(subnet: str = SUBNET, bridge: str = BRIDGE):
    """A bridge on ``subnet`` with its apt proxy; add hosts with ``add(name)``; all torn down
    at the end, even on failure (skips where hosts cannot run)."""
    why = unavailable()
    if why:
        pytest.skip(why)
    hosts = Hosts(debian_root(), subnet=subnet, bridge=bridge)
    try:
        yield hosts.start()
    finally:
        hosts.close()


@pytest.fixture(scope="session")
def cluster_hosts():
    """The session's bridge and apt proxy (10.77.0.0/24); tests add hosts with ``add(name)``
    (booted once per session; torn down at its end, even on failure)."""
    with hosts_on() as hosts:
        yield hosts
