"""The driver interface of the dataplane and the plain data it returns.

Every driver (``local`` = btrfs, ``directory`` = plain directories, later ``spdk`` and
``ceph``) subclasses :class:`Driver` and passes ``tests/compliance``. Results are
dataclasses that ``dataclasses.asdict`` turns into JSON-friendly dicts.
"""

import abc
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Union

from plumbing import errors, sizes

from .errors import InvalidArgument, Unsupported
from .runner import Runner

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
REDUNDANCY_MIN_DEVICES = {"none": 1, "mirror": 2, "mirror3": 3, "raid10": 4}
MEDIA = ("flash", "capacity")
KINDS = ("filesystem", "volume")
SNAPSHOTS_DIR = ".snapshots"



@dataclass
class DeviceSpec:
    """A device to build a pool from: a block device path or ``image:SIZE``."""

    path: str
    fault_domain: str = "default"


@dataclass
class DeviceInfo:
    """A pool member as it is now (``path`` = /dev/loopN or the block device)."""

    path: Optional[str]
    backing: Optional[str]
    fault_domain: str
    size_bytes: int
    state: str  # "online" | "missing"
    errors: int = 0


@dataclass
class PoolInfo:
    """A pool: where it is mounted, its redundancy, usage, health and members."""

    name: str
    driver: str
    mountpoint: str
    redundancy: str
    media: str
    size_bytes: int
    used_bytes: int
    free_bytes: int
    health: str  # "online" | "degraded" | "offline"
    devices: list = field(default_factory=list)
    features_off: dict = field(default_factory=dict)
    # drivers with more to say (ceph: the cluster's status, reasons, failed failure domains,
    # recovery progress) put it here
    health_detail: dict = field(default_factory=dict)


@dataclass
class FileSystemInfo:
    """A file system (a btrfs subvolume, or a directory) in a pool."""

    pool: str
    name: str
    path: str
    quota_bytes: Optional[int]
    used_bytes: int


@dataclass
class VolumeInfo:
    """A thin volume; ``path`` is the file that holds its bytes."""

    pool: str
    name: str
    path: str
    size_bytes: int
    used_bytes: int


@dataclass
class SnapshotInfo:
    """A read-only snapshot of a file system (path = directory) or volume (path = file)."""

    pool: str
    kind: str  # "filesystem" | "volume"
    source: str
    name: str
    path: str
    created: float


@dataclass
class ScrubResult:
    """What a scrub read and repaired."""

    bytes_scrubbed: int
    errors_corrected: int
    errors_uncorrectable: int
    pauses: int = 0  # times it waited for the background I/O budget


def validate_name(name, what: str = "name") -> str:
    """Return ``name`` if it matches ``[a-z0-9][a-z0-9._-]{0,62}``, else raise InvalidArgument."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidArgument(
            f"invalid {what} {name!r}: use 1-63 characters a-z, 0-9, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def validate_kind(kind) -> str:
    """Return ``kind`` if it is "filesystem" or "volume", else raise InvalidArgument."""
    if kind not in KINDS:
        raise InvalidArgument(f"invalid snapshot kind {kind!r}: use 'filesystem' or 'volume'")
    return kind


# The smallest volume worth a block device (SPDK rounds up to 1 MiB anyway), and the largest
# each driver can create and its frontends serve. Volumes are thin: these bound what a
# volume may claim, not what the pool holds (overcommit is allowed; writes beyond the pool's
# space fail with ENOSPC).
MIN_VOLUME_BYTES = 1 << 20
SECTOR_BYTES = 512
_QEMU_MAX = (2**63 - 1) // 2**30 * 2**30    # qemu's BDRV_MAX_LENGTH; btrfs and tgtd take more
MAX_VOLUME_BYTES = {
    "local": _QEMU_MAX,
    # a file on whatever holds the state directory: ext4 (4 KiB blocks) ends at 16 TiB
    "directory": 16 << 40,
    # a thin lvol's cluster map is allocated for its whole size (8 bytes a 4 MiB cluster)
    "spdk": 64 << 40,
    # RBD's object map covers at most 256,000,000 objects of 4 MiB
    "ceph": 256_000_000 * (4 << 20),
}


def check_volume_size(size_bytes: int, driver: str) -> int:
    """Return ``size_bytes`` if a volume of driver ``driver`` may have that size: whole
    512-byte sectors, at least :data:`MIN_VOLUME_BYTES`, at most the driver's entry of
    :data:`MAX_VOLUME_BYTES`; else raise InvalidArgument saying the range."""
    validate_bytes(size_bytes, "volume size")
    top = MAX_VOLUME_BYTES.get(driver, _QEMU_MAX)
    if not MIN_VOLUME_BYTES <= size_bytes <= top:
        raise InvalidArgument(f"a volume on a {driver} pool is {MIN_VOLUME_BYTES} (1 MiB) to "
                              f"{top} bytes; {size_bytes} is not")
    if size_bytes % SECTOR_BYTES:
        raise InvalidArgument(f"a volume is whole {SECTOR_BYTES}-byte sectors; {size_bytes} "
                              f"bytes is not (round to {size_bytes // SECTOR_BYTES * SECTOR_BYTES})")
    return size_bytes


def parse_size(text) -> int:
    """Parse a size into bytes: ``4096``, ``2G``/``2GiB`` (2 * 2**30), ``5GB`` (5 * 10**9);
    see :mod:`plumbing.sizes`."""
    try:
        return sizes.parse_size(text)
    except errors.Invalid as exc:
        raise InvalidArgument(exc.message) from None


def validate_bytes(value, what: str) -> int:
    """Return a positive int byte count, else raise InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgument(f"invalid {what} {value!r}: give a positive number of bytes")
    return value


# progress(pct, message, done=bytes, total=bytes): the byte counts are keyword arguments
ProgressFn = Callable[..., None]
CancelFn = Callable[[], bool]
ThrottleFn = Callable[[int], float]


def recorded_pools(pools_dir: Path, driver: str) -> list:
    """Names of the pool records (``<pools_dir>/<name>.json``) of ``driver``, sorted: the
    drivers share one data directory, and each record says whose it is."""
    names = []
    for record in Path(pools_dir).glob("*.json"):
        try:
            if json.loads(record.read_text()).get("driver") == driver:
                names.append(record.stem)
        except (OSError, ValueError):
            continue
    return sorted(names)


class Driver(abc.ABC):
    """A storage engine: pools of devices holding file systems, volumes and snapshots.

    ``state_dir`` holds the driver's pools (mounted or plain at ``<state_dir>/pools/<name>``),
    their JSON records and image devices. ``runner`` runs external commands (injectable).
    Names are checked against ``[a-z0-9][a-z0-9._-]{0,62}`` (InvalidArgument otherwise).
    """

    name = "abstract"

    def __init__(self, state_dir: Union[str, Path], runner: Optional[Runner] = None):
        self.state_dir = Path(state_dir).absolute()
        self.runner = runner or Runner()
        self.pools_dir = self.state_dir / "pools"
        self.devices_dir = self.state_dir / "devices"

    # -- capabilities ------------------------------------------------------------------
    @abc.abstractmethod
    def capabilities(self) -> dict:
        """What this driver can do, as data (see the module doc of each driver)."""

    # -- pools -------------------------------------------------------------------------
    @abc.abstractmethod
    def create_pool(self, name: str, devices: list, redundancy: str = "none",
                    media: str = "flash") -> PoolInfo:
        """Create and mount a pool; on failure leave nothing behind."""

    @abc.abstractmethod
    def activate_pool(self, name: str) -> PoolInfo:
        """Mount a known pool again (after a restart), degraded when a mirror member is gone."""

    @abc.abstractmethod
    def deactivate_pool(self, name: str) -> None:
        """Unmount a pool and release its devices; its record stays."""

    @abc.abstractmethod
    def destroy_pool(self, name: str) -> None:
        """Delete an empty pool, its images and record (InUse if it holds anything)."""

    @abc.abstractmethod
    def pool_info(self, name: str) -> PoolInfo:
        """The pool's usage, health and devices."""

    def pool_attached(self, name: str) -> bool:
        """Whether what the services use of the pool is there now (mounted); a cheap look,
        for a check every few seconds. By default: the pool is not offline."""
        return self.pool_info(name).health != "offline"

    @abc.abstractmethod
    def list_pools(self) -> list:
        """Names of the pools this driver has records for."""

    @abc.abstractmethod
    def scrub_pool(self, name: str, progress: Optional[ProgressFn] = None,
                   should_cancel: Optional[CancelFn] = None,
                   throttle: Optional[ThrottleFn] = None) -> ScrubResult:
        """Read and verify every block; report progress; Cancelled when asked to stop.
        ``throttle(nbytes) -> seconds``, given the bytes read since its last call, says how
        long to pause (0: go on): background work draws from the caller's I/O budget. An
        optional ``throttle.rate()`` (bytes/s allowed now, 0 = none) lets a driver that can
        pace the devices itself (btrfs: the kernel's scrub limit) pause less often."""

    def stop_scrub(self, name: str) -> bool:
        """Stop a scrub of pool ``name`` left running by a process that died mid-scrub (a
        killed worker); True if one was running. Drivers whose scrub ends with the calling
        process have nothing to stop."""
        return False

    # -- file systems ------------------------------------------------------------------
    @abc.abstractmethod
    def create_filesystem(self, pool: str, name: str,
                          quota_bytes: Optional[int] = None) -> FileSystemInfo:
        """Create a file system, optionally with a quota."""

    @abc.abstractmethod
    def set_filesystem_quota(self, pool: str, name: str, quota_bytes: Optional[int]) -> None:
        """Set (or with None, remove) a file system's quota."""

    @abc.abstractmethod
    def filesystem_info(self, pool: str, name: str) -> FileSystemInfo:
        """A file system's path, quota and usage."""

    def set_filesystem_access(self, pool: str, name: str, uid: Optional[int] = None,
                              gid: Optional[int] = None, mode: Optional[int] = None) -> None:
        """Set the owner, group and permission bits of a file system's root (None: keep)."""
        raise Unsupported("this driver has no file systems whose owner could be set")

    @abc.abstractmethod
    def list_filesystems(self, pool: str) -> list:
        """Names of the pool's file systems."""

    @abc.abstractmethod
    def delete_filesystem(self, pool: str, name: str) -> None:
        """Delete a file system and its snapshots."""

    # -- volumes -----------------------------------------------------------------------
    @abc.abstractmethod
    def create_volume(self, pool: str, name: str, size_bytes: int) -> VolumeInfo:
        """Create a thin volume of ``size_bytes``."""

    @abc.abstractmethod
    def resize_volume(self, pool: str, name: str, size_bytes: int) -> VolumeInfo:
        """Grow a volume (shrinking raises InvalidArgument)."""

    @abc.abstractmethod
    def volume_info(self, pool: str, name: str) -> VolumeInfo:
        """A volume's path, size and usage."""

    @abc.abstractmethod
    def list_volumes(self, pool: str) -> list:
        """Names of the pool's volumes."""

    @abc.abstractmethod
    def delete_volume(self, pool: str, name: str) -> None:
        """Delete a volume and its snapshots."""

    # -- snapshots ---------------------------------------------------------------------
    @abc.abstractmethod
    def create_snapshot(self, pool: str, kind: str, source: str, name: str) -> SnapshotInfo:
        """Take a read-only snapshot of a file system or volume."""

    @abc.abstractmethod
    def delete_snapshot(self, pool: str, kind: str, source: str, name: str) -> None:
        """Delete a snapshot."""

    @abc.abstractmethod
    def list_snapshots(self, pool: str, kind: str, source: str) -> list:
        """The source's snapshots (SnapshotInfo), oldest first."""

    @abc.abstractmethod
    def clone_snapshot(self, pool: str, kind: str, source: str, snapshot: str,
                       new_name: str) -> Union[FileSystemInfo, VolumeInfo]:
        """Make a writable file system or volume from a snapshot."""

    @abc.abstractmethod
    def send_snapshot(self, pool: str, kind: str, source: str, snapshot: str,
                      parent: Optional[str] = None,
                      parent_source: Optional[str] = None) -> Iterator[bytes]:
        """Yield a byte stream of the snapshot (incremental against ``parent``).

        ``parent`` is a snapshot of ``source``, or of ``parent_source`` (another object of
        the same kind in the same pool): e.g. the received snapshot a promoted clone was
        made from, which is what the other side still has (failback). The stream applies
        wherever a snapshot standing for that parent exists: the parent itself, a received
        copy of it, or a :meth:`copy_snapshot` of either."""

    @abc.abstractmethod
    def receive_snapshot(self, pool: str, kind: str, target: str, stream: Iterable[bytes],
                         name: str) -> SnapshotInfo:
        """Apply a stream from send_snapshot as ``target``'s snapshot ``name``."""

    @abc.abstractmethod
    def rollback(self, pool: str, kind: str, name: str,
                 snapshot: str) -> Union[FileSystemInfo, VolumeInfo]:
        """Make the live content of a file system or volume equal to its snapshot
        ``snapshot``, in place: same name, same path (exports and open volume handles stay
        valid), its snapshots kept, its quota kept; a volume takes the snapshot's size.
        What was written since the snapshot is gone: snapshot first to keep it. A rollback
        cut short (crash) is completed by running it again."""

    def changed_since(self, pool: str, kind: str, name: str, snapshot: str) -> list:
        """Paths (relative, sorted) of file system or volume ``name`` changed since its
        snapshot ``snapshot``: created, written, removed, renamed or re-permissioned."""
        raise Unsupported(f"the {self.name} driver cannot list what changed since a "
                          "snapshot")

    @abc.abstractmethod
    def copy_snapshot(self, pool: str, kind: str, source: str, snapshot: str, target: str,
                      name: str) -> SnapshotInfo:
        """Make snapshot ``name`` of ``target`` with the content of ``source``'s snapshot
        ``snapshot`` (same pool and kind) that stands for it as the base of incremental
        streams: a stream sent with the original as parent, or with a received copy of the
        original as parent on another appliance, applies on top of the copy. The original
        can then be deleted. Used to re-base a replica after failback."""
