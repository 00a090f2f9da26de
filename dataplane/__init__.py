"""Strata's dataplane: pools, file systems, volumes, snapshots and send/receive.

No Django here. Pick a driver with :func:`open_driver`::

    from dataplane import open_driver, DeviceSpec
    drv = open_driver("auto", "/var/lib/strata")
    drv.create_pool("default", [DeviceSpec("image:8G")])
"""

import os
import shutil
from pathlib import Path
from typing import Union

from .driver import (MAX_VOLUME_BYTES, MIN_VOLUME_BYTES, DeviceInfo, DeviceSpec, Driver,
                     FileSystemInfo, PoolInfo, ScrubResult, SnapshotInfo, VolumeInfo,
                     check_volume_size, parse_size, validate_name)
from .errors import (AlreadyExists, Cancelled, CommandFailed, DataplaneError, InsufficientDevices,
                     InUse, InvalidArgument, NotFound, Offline, Unsupported)
from .local import DirectoryDriver, LocalDriver
from .runner import Runner

SPDK_SOCKET_ENV = "STRATA_SPDK_SOCKET"


def _spdk_driver(state_dir, runner=None):
    """The spdk driver on nvmf_tgt's RPC socket: $STRATA_SPDK_SOCKET, else the one `strata up`
    runs (``<state_dir>/run/spdk/spdk.sock``), else SPDK's default /var/tmp/spdk.sock."""
    from .spdk.driver import SpdkDriver   # imported on use: most installations have no SPDK
    from .spdk.target import target_dir   # (same reason)
    own = target_dir(state_dir) / "spdk.sock"
    socket = os.environ.get(SPDK_SOCKET_ENV) or (str(own) if own.exists() else "/var/tmp/spdk.sock")
    return SpdkDriver(state_dir, runner=runner, rpc_socket=socket)


def _ceph_driver(state_dir, runner=None):
    """The ceph driver; each pool names its cluster (ceph.conf, client, keyring)."""
    from .ceph.driver import CephDriver   # imported on use: it loads librados only when used
    return CephDriver(state_dir, runner=runner)


DRIVERS = {"local": LocalDriver, "directory": DirectoryDriver, "spdk": _spdk_driver,
           "ceph": _ceph_driver}

__all__ = [
    "MAX_VOLUME_BYTES", "MIN_VOLUME_BYTES", "check_volume_size",
    "AlreadyExists", "Cancelled", "CommandFailed", "DataplaneError", "DeviceInfo", "DeviceSpec",
    "DirectoryDriver", "Driver", "DRIVERS", "FileSystemInfo", "InUse", "InsufficientDevices",
    "InvalidArgument", "LocalDriver", "NotFound", "Offline", "PoolInfo", "Runner",
    "ScrubResult", "SnapshotInfo", "Unsupported", "VolumeInfo", "local_available",
    "open_driver", "parse_size", "validate_name",
]


def local_available() -> tuple:
    """``(True, "")`` when the local driver can run here, else ``(False, why not)``."""
    if os.geteuid() != 0:
        return False, "not running as root"
    for tool in ("btrfs", "mkfs.btrfs", "losetup", "mount", "blkid"):
        if not shutil.which(tool):
            return False, f"{tool} is not installed (apt-get install btrfs-progs util-linux)"
    try:
        with open("/proc/filesystems") as f:
            if "btrfs" not in f.read().split():
                return False, "the kernel has no btrfs support loaded (modprobe btrfs)"
    except OSError as exc:
        return False, f"cannot read /proc/filesystems: {exc}"
    return True, ""


def open_driver(kind: str, state_dir: Union[str, Path], runner: Runner = None) -> Driver:
    """The driver ``kind`` ("local", "directory", "spdk", "ceph" or "auto") keeping state in
    ``state_dir``.

    "auto" is local when running as root with btrfs-progs and kernel btrfs, else directory.
    "spdk" talks to spdk_tgt at ``$STRATA_SPDK_SOCKET`` (default /var/tmp/spdk.sock).
    """
    if kind == "auto":
        kind = "local" if local_available()[0] else "directory"
    if kind not in DRIVERS:
        raise InvalidArgument(f"unknown dataplane driver {kind!r}: use one of "
                              f"{', '.join(DRIVERS)} or 'auto'")
    return DRIVERS[kind](state_dir, runner=runner)
