"""The hypervisor side of guest tests: a network namespace of the test's own, joined to the
host by a veth pair on a private /24 (the host end is where Strata's data services listen),
with a bridge inside that guests' tap devices join; and libvirtd + virtlogd running in it.

Nothing on the host changes but the veth's host end (removed with the namespace). libvirtd
runs in a private mount namespace over the test's own /etc/libvirt, /run and a /var overlay,
so it reads and writes nothing of the host's; virsh reaches it through its socket path.
Everything started is stopped by PID.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path


def ip(*args, netns: str = "") -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run(prefix + ["ip", *args], check=True, capture_output=True, timeout=30)


def _used_prefixes() -> str:
    return subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True,
                          check=True).stdout


class Netns:
    """A network namespace with ``br0`` at ``ns_ip`` bridged to the host's ``host_ip``
    (``subnet``.1 and .2 of a /24); guests take ``guest_ip(n)`` (.10 and up)."""

    def __init__(self):
        tag = f"{os.getpid() % 10000:04d}{random.randrange(16 ** 4):04x}"
        self.name, self.host_if = f"strata-{tag}", f"sv{tag}"
        used = _used_prefixes()
        for _ in range(100):
            self.subnet = f"10.{random.randrange(200, 250)}.{random.randrange(1, 250)}"
            if f" {self.subnet}." not in used:
                break
        self.host_ip, self.ns_ip = f"{self.subnet}.1", f"{self.subnet}.2"
        self.taps: list[str] = []

    def guest_ip(self, n: int = 0) -> str:
        return f"{self.subnet}.{10 + n}"

    def __enter__(self) -> "Netns":
        ip("netns", "add", self.name)
        try:
            ip("link", "add", self.host_if, "type", "veth", "peer", "name", "eth0",
               "netns", self.name)
            ip("addr", "add", f"{self.host_ip}/24", "dev", self.host_if)
            ip("link", "set", self.host_if, "up")
            n = self.name
            ip("link", "set", "lo", "up", netns=n)
            ip("link", "add", "br0", "type", "bridge", netns=n)
            ip("link", "set", "eth0", "master", "br0", netns=n)
            ip("addr", "add", f"{self.ns_ip}/24", "dev", "br0", netns=n)
            for dev in ("eth0", "br0"):
                ip("link", "set", dev, "up", netns=n)
        except BaseException:
            self.__exit__()
            raise
        return self

    def add_tap(self) -> str:
        """A tap device on the bridge, for ``-netdev tap,ifname=NAME,script=no``."""
        name = f"tap{len(self.taps)}"
        ip("tuntap", "add", "dev", name, "mode", "tap", netns=self.name)
        ip("link", "set", name, "master", "br0", netns=self.name)
        ip("link", "set", name, "up", netns=self.name)
        self.taps.append(name)
        return name

    def __exit__(self, *exc) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


QEMU_CONF = """user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
"""
LIBVIRTD_CONF = 'auth_unix_rw = "none"\nunix_sock_rw_perms = "0700"\n'
START = """set -e
mount --bind {w}/etc /etc/libvirt
mount --bind {w}/passwd /etc/passwd
mount --bind {w}/group /etc/group
mount -t overlay overlay -o lowerdir=/var,upperdir={w}/upper,workdir={w}/work /var
mount --bind {w}/run /run
mkdir -p /run/libvirt
virtlogd > {w}/virtlogd.log 2>&1 &
echo $! > {w}/virtlogd.pid
exec libvirtd
"""


class Libvirtd:
    """libvirtd and virtlogd inside ``netns`` (no systemd); ``virsh(*args)`` talks to it.

    Its qemu.conf runs guests as root without a security driver, cgroups or namespaces
    (a test machine); the qemu user Debian's libvirt expects (libvirt-qemu) exists only in
    its private /etc/passwd."""

    def __init__(self, workdir: Path, netns: Netns):
        self.w, self.netns = Path(workdir), netns
        self.proc = None
        self.uri = f"qemu:///system?socket={self.w}/run/libvirt/libvirt-sock"

    def start(self, timeout: float = 60) -> "Libvirtd":
        for d in ("etc", "upper", "work", "run"):
            (self.w / d).mkdir(parents=True, exist_ok=True)
        shutil.copy("/etc/libvirt/libvirt.conf", self.w / "etc")
        (self.w / "etc" / "qemu.conf").write_text(QEMU_CONF)
        (self.w / "etc" / "libvirtd.conf").write_text(LIBVIRTD_CONF)
        (self.w / "passwd").write_text(Path("/etc/passwd").read_text() +
                                       "libvirt-qemu:x:64055:64055::/var/lib/libvirt:/bin/false\n")
        (self.w / "group").write_text(Path("/etc/group").read_text() + "libvirt-qemu:x:64055:\n")
        (self.w / "start.sh").write_text(START.format(w=self.w))
        with open(self.w / "libvirtd.log", "wb") as log:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns.name, "unshare", "--mount",
                 "--propagation", "private", "sh", str(self.w / "start.sh")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while self.virsh("version", check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("libvirtd did not start:\n" +
                                   (self.w / "libvirtd.log").read_text()[-3000:])
            time.sleep(0.2)
        return self

    def virsh(self, *args, check: bool = True) -> subprocess.CompletedProcess:
        cp = subprocess.run(["virsh", "-c", self.uri, *args], capture_output=True, text=True,
                            timeout=120)
        if check and cp.returncode != 0:
            raise AssertionError(f"virsh {' '.join(args)}: {cp.stderr.strip()}")
        return cp

    def stop(self) -> None:
        """Destroy every domain, then stop libvirtd and virtlogd (by PID)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            names = self.virsh("list", "--name", check=False).stdout.split()
            for name in names:
                self.virsh("destroy", name, check=False)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        pidfile = self.w / "virtlogd.pid"
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
        self.proc = None
