"""Shared helpers for dataplane tests: driver factories, temp state dirs, loop cleanup.

A driver factory is an object with ``name``, ``marks`` (pytest marks), ``pool_devices(n)``
(devices for a pool of ``n`` members) and ``make(state_dir)`` (a driver). Later drivers
(``spdk``, ``ceph``) add a factory to :data:`DRIVER_FACTORIES`.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from dataplane import DeviceSpec, DirectoryDriver, LocalDriver, local_available


class LocalFactory:
    """btrfs on loop-attached sparse images (needs root)."""

    name = "local"
    marks = [pytest.mark.root]
    device_size = "256M"

    def skip_reason(self):
        ok, why = local_available()
        return None if ok else f"local driver unavailable: {why}"

    def pool_devices(self, n=1, size=None):
        return [DeviceSpec(f"image:{size or self.device_size}", fault_domain=f"fd{i}")
                for i in range(n)]

    def make(self, state_dir):
        return LocalDriver(state_dir)


class DirectoryFactory:
    """Plain directories (always available)."""

    name = "directory"
    marks = []

    def skip_reason(self):
        return None

    def pool_devices(self, n=1, size="256M"):
        return [DeviceSpec(f"image:{size}")]

    def make(self, state_dir):
        return DirectoryDriver(state_dir)


class SpdkFactory:
    """The spdk driver on the session's real nvmf_tgt (tests/spdk_support.py), blank for each
    driver.
    Volumes are bdevs, not files, so byte-level checks are gated by
    ``capabilities()["volume_paths"]`` (tests/test_spdk_nvmf.py moves bytes over NVMe/TCP);
    file systems by ``["filesystems"]``."""

    name = "spdk"
    marks = []

    def skip_reason(self):
        from tests.spdk_support import spdk_unavailable
        return spdk_unavailable()

    def pool_devices(self, n=1, size="256M"):
        return [DeviceSpec(f"image:{size}", fault_domain=f"fd{i}") for i in range(n)]

    def make(self, state_dir):
        from dataplane.spdk.driver import SpdkDriver
        from tests.spdk_support import shared_target

        target = shared_target()
        return SpdkDriver(state_dir, rpc_socket=str(target.rpc_socket), timeout=30)


class CephFactory:
    """The ceph driver on the session's development cluster (tests/ceph.py). Volumes are
    RBD images: ``read_at``/``write_at``/``size_of`` below open their ``rbd:`` paths with
    librbd. RADOS pool names carry a prefix unique to each driver, so that a pool a failed
    test left behind never collides with the next test's."""

    name = "ceph"
    marks = [pytest.mark.root]
    count = 0

    def skip_reason(self):
        from tests.ceph import ceph_unavailable
        return ceph_unavailable()

    def pool_devices(self, n=1, size=None):
        return []

    def make(self, state_dir):
        from dataplane.ceph.driver import CephDriver
        from tests.ceph import shared_cluster

        cluster = shared_cluster()
        CephFactory.count += 1
        return CephDriver(state_dir, ceph_conf=str(cluster.conf), client=cluster.client,
                          pool_prefix=f"t{os.getpid()}-{CephFactory.count}.")


DRIVER_FACTORIES = [LocalFactory(), DirectoryFactory(), SpdkFactory(), CephFactory()]


def driver_params():
    """``pytest.param`` objects, one per factory, with the factory's marks."""
    return [pytest.param(f, marks=f.marks, id=f.name) for f in DRIVER_FACTORIES]


def loops_under(prefix: str) -> list:
    """Loop devices whose backing file lies under ``prefix``."""
    try:
        out = subprocess.run(["losetup", "--list", "--noheadings", "-O", "NAME,BACK-FILE"],
                             capture_output=True, text=True).stdout
    except FileNotFoundError:
        return []
    found = []
    for line in out.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[1].startswith(prefix):
            found.append(parts[0])
    return found


def teardown_state_dir(driver, state_dir: str) -> None:
    """Destroy every pool the driver knows, then unmount and detach anything left under
    ``state_dir``, then delete it. Used in fixture teardowns (runs even on failure)."""
    try:
        for pool in driver.list_pools():
            try:
                info = driver.pool_info(pool)
                if info.health == "offline":
                    driver.activate_pool(pool)
                for snapless in ("filesystem", "volume"):
                    names = (driver.list_filesystems(pool) if snapless == "filesystem"
                             else driver.list_volumes(pool))
                    for n in names:
                        (driver.delete_filesystem if snapless == "filesystem"
                         else driver.delete_volume)(pool, n)
                driver.destroy_pool(pool)
            except Exception:
                pass
    finally:
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split()[4] for line in f]
        for mnt in sorted((m for m in mounts if m.startswith(state_dir)), reverse=True):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        for loop in loops_under(state_dir):
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        subprocess.run(["chattr", "-R", "-i", state_dir], capture_output=True)
        subprocess.run(["chmod", "-R", "u+w", state_dir], capture_output=True)
        shutil.rmtree(state_dir, ignore_errors=True)


def make_state_dir() -> str:
    """A fresh ``strata-test-`` temporary directory."""
    return tempfile.mkdtemp(prefix="strata-test-")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class _RbdImage:
    """An RBD image (or snapshot) opened from its ``rbd:`` path, for byte checks."""

    def __init__(self, path, read_only=False):
        import rados
        import rbd

        from dataplane.ceph.rbd import parse_rbd_path

        spec = parse_rbd_path(path)
        conf = {"keyring": spec["keyring"]} if spec["keyring"] else {}
        self.cluster = rados.Rados(conffile=spec["conf"], name=f"client.{spec['id']}", conf=conf)
        self.cluster.connect(timeout=10)
        self.ioctx = self.cluster.open_ioctx(spec["pool"])
        self.image = rbd.Image(self.ioctx, spec["image"], snapshot=spec["snap"],
                               read_only=read_only or bool(spec["snap"]))
        self.snapshot = bool(spec["snap"])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.image.close()
        self.ioctx.close()
        self.cluster.shutdown()


def size_of(path) -> int:
    """Size of a volume's file, or of an RBD image."""
    if str(path).startswith("rbd:"):
        with _RbdImage(path, read_only=True) as img:
            return img.image.size()
    return os.path.getsize(path)


def write_at(path, offset: int, data: bytes) -> None:
    """Write ``data`` at ``offset`` of an existing file (or RBD image) and fsync; a
    read-only one raises OSError."""
    if str(path).startswith("rbd:"):
        with _RbdImage(path) as img:
            if img.snapshot:
                raise OSError(30, "read-only RBD snapshot", str(path))
            img.image.write(data, offset)
            img.image.flush()
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_at(path, offset: int, length: int) -> bytes:
    if str(path).startswith("rbd:"):
        with _RbdImage(path, read_only=True) as img:
            return img.image.read(offset, length)
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)
