"""Turning DeviceSpecs into devices, and refusing devices that are already in use."""

import os
import stat
from pathlib import Path

from . import btrfs
from ..driver import DeviceSpec, parse_size
from ..errors import InUse, InvalidArgument, NotFound
from ..runner import Runner

IMAGE_PREFIX = "image:"
BTRFS_MIN_DEVICE = 114 * 1024 * 1024  # mkfs.btrfs refuses smaller devices


def is_image(spec: DeviceSpec) -> bool:
    """Whether the spec asks for a sparse image file (``image:SIZE``)."""
    return spec.path.startswith(IMAGE_PREFIX)


def image_size(spec: DeviceSpec, minimum: int = BTRFS_MIN_DEVICE) -> int:
    """The size an ``image:SIZE`` spec asks for; InvalidArgument when below ``minimum``."""
    size = parse_size(spec.path[len(IMAGE_PREFIX):])
    if size < minimum:
        raise InvalidArgument(f"device {spec.path!r} is too small: btrfs needs at least "
                              f"{minimum // (1024 * 1024)} MiB per device")
    return size


def check_block_device(path: str) -> str:
    """Return the real path of an existing block device, else NotFound/InvalidArgument."""
    if not os.path.isabs(path):
        raise InvalidArgument(f"invalid device {path!r}: give an absolute block device path "
                              "(/dev/...) or 'image:SIZE'")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise NotFound(f"device {path} does not exist") from None
    if not stat.S_ISBLK(st.st_mode):
        raise InvalidArgument(f"{path} is not a block device: give a block device path or "
                              "'image:SIZE'")
    return os.path.realpath(path)


def check_not_in_use(runner: Runner, path: str, pools: dict) -> None:
    """Raise InUse naming ``path`` when it is mounted, swap, held, carries a signature, or
    belongs to a pool in ``pools`` (pool name -> list of device paths)."""
    real = os.path.realpath(path)
    for pool, paths in pools.items():
        if real in {os.path.realpath(p) for p in paths if p}:
            raise InUse(f"device {path} is already in use by pool {pool!r}")
    for mnt, (_fstype, source) in btrfs.mount_points().items():
        if source.startswith("/") and os.path.realpath(source) == real:
            raise InUse(f"device {path} is already in use: mounted at {mnt}")
    try:
        with open("/proc/swaps") as f:
            for line in f.readlines()[1:]:
                if line.split() and os.path.realpath(line.split()[0]) == real:
                    raise InUse(f"device {path} is already in use as swap")
    except FileNotFoundError:
        pass
    holders = Path("/sys/class/block") / os.path.basename(real) / "holders"
    if holders.is_dir() and any(holders.iterdir()):
        names = ", ".join(sorted(h.name for h in holders.iterdir()))
        raise InUse(f"device {path} is already in use by {names}")
    found = btrfs.signature(runner, real)
    if found:
        raise InUse(f"device {path} is already in use: it holds a {found} signature "
                    f"(wipe it with 'wipefs -a {path}' if its data is no longer needed)")
