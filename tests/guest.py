"""Real QEMU guests for tests: a Debian cloud kernel and a busybox initramfs, booted under TCG.

The initramfs (busybox-static, an /init script, the virtio, network and NFS modules of
/lib/modules/*-cloud-amd64 with their dependencies) is built once per test session. Each boot
appends a small second cpio archive holding the test's script (``/run.sh``) and any files it
needs, so nothing is passed on the kernel command line. /init loads the virtio modules,
runs ``/run.sh`` (in its shell: ``load nfs`` loads the NFS client) and powers off; the guest's serial console is its stdout, where the script prints
markers (``echo KEY value``) that :meth:`Boot.marker` reads back.

Boots are bounded (killed after ``timeout``, by PID) and nothing stays running. Standard
library only.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BASE_MODULES = ("virtio_pci", "virtio_blk", "virtio_net")
# loaded by a script that needs them (`load nfs`, `load nvme`): they take seconds under TCG
NFS_MODULES = ("nfsv4", "nfs_layout_nfsv41_files")
NVME_MODULES = ("nvme_tcp",)                # NVMe/TCP host, with nvme-fabrics and nvme-core
EXTRA_MODULES = {"nfs": NFS_MODULES, "nvme": NVME_MODULES}
BEGIN, END = "STRATA-GUEST-BEGIN", "STRATA-GUEST-END"
INIT = f"""#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
load() {{ while read m; do insmod /lib/modules/$m 2>/dev/null; done < /modules.$1; }}
load base
echo "{BEGIN} $(cut -d' ' -f1 /proc/uptime)"
. /run.sh
echo "{END} $? $(cut -d' ' -f1 /proc/uptime)"
sync
poweroff -f
"""


def missing() -> str | None:
    """What is not installed for guest tests (None when they can run)."""
    for binary, package in (("qemu-system-x86_64", "qemu-system-x86"),
                            ("busybox", "busybox-static"), ("cpio", "cpio")):
        if shutil.which(binary) is None:
            return f"{binary} (apt-get install {package})"
    if not kernel():
        return "a cloud kernel (apt-get install linux-image-cloud-amd64)"
    return None


def kernel() -> str | None:
    """The newest /boot/vmlinuz-*-cloud-amd64 that has its modules, or None."""
    found = [k for k in sorted(glob.glob("/boot/vmlinuz-*-cloud-amd64"))
             if os.path.isdir(f"/lib/modules/{k.split('vmlinuz-', 1)[1]}")]
    return found[-1] if found else None


def module_order(moddir: Path, wanted, loaded=()) -> list[str]:
    """Paths (relative to ``moddir``) of ``wanted`` and their dependencies, each after what it
    needs, from modules.dep."""
    deps = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, needs = line.partition(":")
        deps[path] = needs.split()
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    order: list[str] = []

    def add(path):
        if path in order or path in loaded:
            return
        for dep in deps.get(path, []):
            add(dep)
        order.append(path)

    for name in wanted:
        if name in by_name:           # built into this kernel: nothing to load
            add(by_name[name])
    return order


def _cpio(root: Path, out: Path) -> None:
    """A gzipped newc archive of everything under ``root``."""
    names = subprocess.run(["find", "."], cwd=root, capture_output=True, check=True).stdout
    with open(out, "wb") as fh:
        cpio = subprocess.Popen(["cpio", "-o", "-H", "newc", "--quiet"], cwd=root,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        gz = subprocess.Popen(["gzip", "-1"], stdin=cpio.stdout, stdout=fh)
        cpio.stdout.close()
        cpio.communicate(names)
        gz.wait()
    if cpio.returncode or gz.returncode:
        raise RuntimeError(f"building {out} failed")


@dataclass
class Image:
    """A kernel and the base initramfs."""

    kernel: str
    initrd: Path
    workdir: Path

    @classmethod
    def build(cls, workdir: Path) -> "Image":
        """Build (or reuse, from ``workdir``) the base initramfs for the installed kernel."""
        vmlinuz = kernel()
        release = vmlinuz.split("vmlinuz-", 1)[1]
        stamp = hashlib.sha256((INIT + release + repr(EXTRA_MODULES)).encode()).hexdigest()[:12]
        initrd = Path(workdir) / f"base-{release}-{stamp}.cpio.gz"
        if not initrd.exists():
            root = Path(workdir) / "root"
            shutil.rmtree(root, ignore_errors=True)
            for d in ("bin", "proc", "sys", "dev", "mnt", "tmp", "lib/modules"):
                (root / d).mkdir(parents=True, exist_ok=True)
            shutil.copy(shutil.which("busybox"), root / "bin" / "busybox")
            (root / "init").write_text(INIT)
            (root / "init").chmod(0o755)
            moddir = Path("/lib/modules") / release
            base = module_order(moddir, BASE_MODULES)
            sets = [("base", base)] + [(name, module_order(moddir, mods, base))
                                       for name, mods in EXTRA_MODULES.items()]
            for name, order in sets:
                for rel in order:
                    dst = root / "lib" / "modules" / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(moddir / rel, dst)
                (root / f"modules.{name}").write_text("".join(f"{rel}\n" for rel in order))
            _cpio(root, initrd.with_suffix(".tmp"))
            os.replace(initrd.with_suffix(".tmp"), initrd)
            shutil.rmtree(root)
        return cls(vmlinuz, initrd, Path(workdir))

    def initrd_with(self, script: str, files: dict | None = None, tag: str = "run") -> Path:
        """The base initramfs followed by an archive holding ``/run.sh`` and ``files``
        ({guest path: bytes}); the kernel unpacks both, the second over the first."""
        root = self.workdir / f"{tag}-extra"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        (root / "run.sh").write_text(script)
        for name, data in (files or {}).items():
            path = root / name.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        extra = self.workdir / f"{tag}-extra.cpio.gz"
        _cpio(root, extra)
        shutil.rmtree(root)
        out = self.workdir / f"{tag}-initrd.cpio.gz"
        with open(out, "wb") as fh:
            fh.write(self.initrd.read_bytes())
            fh.write(extra.read_bytes())
        return out

    def boot_args(self, initrd: Path, memory_mib: int = 512, append: str = "") -> list[str]:
        """qemu-system-x86_64 arguments of a TCG guest on the serial console (stdio)."""
        return ["qemu-system-x86_64", "-machine", "q35,accel=tcg", "-m", f"{memory_mib}M",
                "-nodefaults", "-display", "none", "-serial", "stdio", "-monitor", "none",
                "-no-reboot",
                "-kernel", self.kernel, "-initrd", str(initrd),
                "-append", f"console=ttyS0 panic=-1 quiet {append}".strip()]


class Boot:
    """One guest: ``qemu-system-x86_64`` with its console in ``log``; ``wait()`` until it
    powers off, killed (by PID) if it outlives ``timeout``. Use as a context manager."""

    def __init__(self, argv: list[str], log: Path, timeout: float = 180, netns: str = ""):
        self.log, self.timeout = Path(log), timeout
        prefix = ["ip", "netns", "exec", netns] if netns else []
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(prefix + argv, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT)
        self.started = time.monotonic()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, text: str) -> float:
        """Return (``time.monotonic()``) once the console printed ``text``."""
        while text not in self.output():
            if self.proc.poll() is not None:
                raise AssertionError(f"guest exited before printing {text!r}:\n"
                                     f"{self.output()[-3000:]}")
            if time.monotonic() - self.started > self.timeout:
                self.kill()
                raise AssertionError(f"guest did not print {text!r} within {self.timeout} s:"
                                     f"\n{self.output()[-3000:]}")
            time.sleep(0.05)
        return time.monotonic()

    def wait(self) -> str:
        """Wait for the guest to power off; its console output. AssertionError when it was
        killed on timeout or its script did not end with status 0."""
        left = self.timeout - (time.monotonic() - self.started)
        try:
            self.proc.wait(max(left, 1))
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"guest still running after {self.timeout} s, killed:\n"
                                 f"{self.output()[-3000:]}") from None
        out = self.output()
        if f"{END} 0 " not in out:
            raise AssertionError(f"guest script failed or did not run:\n{out[-3000:]}")
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> "Boot":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def marker(self, key: str) -> str:
        """The value the guest printed as ``KEY value`` (the last one)."""
        found = re.findall(rf"^{re.escape(key)} (.*?)\r?$", self.output(), re.M)
        if not found:
            raise AssertionError(f"guest printed no {key}:\n{self.output()[-3000:]}")
        return found[-1]
