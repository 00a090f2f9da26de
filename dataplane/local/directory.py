"""The ``directory`` driver: the fallback without root or btrfs.

A pool is a plain directory, file systems are directories, volumes sparse files, snapshots
copies (reflinked where the file system can, so instant there) made read-only (immutable
flag when running as root, else permissions). Quotas, redundancy, scrub and send/receive are
off and say why in ``features_off``; asking for them raises :class:`Unsupported`.
"""

import fcntl
import os
import shutil
import stat
import time
from pathlib import Path

from plumbing.inodeflags import FS_IMMUTABLE_FL, set_flag

from .layout import DATA_FILE, BaseDriver, remove_tree, tree_usage
from .devices import IMAGE_PREFIX, is_image
from ..driver import (SNAPSHOTS_DIR, DeviceInfo, FileSystemInfo, PoolInfo, SnapshotInfo,
                     VolumeInfo, parse_size, validate_bytes, validate_kind, validate_name)
from ..errors import AlreadyExists, InUse, InvalidArgument, NotFound, Unsupported

FICLONE = 0x40049409

FEATURES_OFF = {
    "quotas": "the directory driver cannot limit a directory's size; use the local (btrfs) "
              "driver, which needs root and btrfs-progs",
    "redundancy": "the directory driver keeps one copy on the file system below it; use the "
                  "local (btrfs) driver for mirrors",
    "scrub": "the directory driver has no checksums to verify; use the local (btrfs) driver",
    "send_receive": "the directory driver has no snapshot streams; use the local (btrfs) "
                    "driver for replication",
    "block_devices": "the directory driver stores data in its state directory, not on block "
                     "devices",
    "rollback": "the directory driver cannot roll a file system or volume back in place; "
                "clone the snapshot instead, or use the local (btrfs) driver",
}


def _reflink_works(directory: Path) -> bool:
    src = directory / ".reflink-probe-a"
    dst = directory / ".reflink-probe-b"
    try:
        src.write_bytes(b"x" * 4096)
        with open(src, "rb") as s, open(dst, "wb") as d:
            fcntl.ioctl(d.fileno(), FICLONE, s.fileno())
        return True
    except OSError:
        return False
    finally:
        for p in (src, dst):
            try:
                p.unlink()
            except FileNotFoundError:
                pass


def _set_immutable(path: Path, on: bool) -> bool:
    """Set or clear the immutable flag; False when the file system or user cannot."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return set_flag(fd, FS_IMMUTABLE_FL, on)
    finally:
        os.close(fd)


def _walk_all(root: Path):
    """Every path under ``root`` (files before their directories), then root."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames:
            yield Path(dirpath) / n
    yield root


class DirectoryDriver(BaseDriver):
    """Pools as plain directories under ``<state_dir>/pools`` (no root needed)."""

    name = "directory"

    def capabilities(self) -> dict:
        """What the directory driver does, as data."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        reflink = _reflink_works(self.state_dir)
        off = dict(FEATURES_OFF)
        if not reflink:
            off["instant_snapshots"] = ("snapshots and clones are full copies because the "
                                        "file system below the state directory has no reflink")
        return {
            "driver": self.name, "redundancy": ["none"], "min_devices": {"none": 0},
            "media": ["flash", "capacity"], "quotas": False, "instant_snapshots": reflink,
            "readonly_snapshots": True, "send_receive": False, "scrub": False,
            "volumes": True, "filesystems": True, "clones": True,
            "clones_depend_on_snapshot": False, "block_devices": False,
            "image_devices": True, "features_off": off,
        }

    def _pool_root(self, pool: str) -> Path:
        self._load_record(pool)
        root = self._mountpoint(pool)
        if not root.is_dir():
            raise NotFound(f"pool {pool!r} has lost its directory {root}: destroy and "
                           "create it again")
        return root

    # -- pools -------------------------------------------------------------------------
    def create_pool(self, name, devices=(), redundancy="none", media="flash") -> PoolInfo:
        """Create the pool directory. ``image:SIZE`` devices only set its nominal size."""
        specs = self._check_new_pool(name, devices, redundancy, media)
        if redundancy != "none":
            raise Unsupported(f"redundancy {redundancy!r} is off: {FEATURES_OFF['redundancy']}")
        nominal = 0
        for spec in specs:
            if not is_image(spec):
                raise Unsupported(f"device {spec.path}: {FEATURES_OFF['block_devices']}; "
                                  f"give '{IMAGE_PREFIX}SIZE' instead")
            nominal += parse_size(spec.path[len(IMAGE_PREFIX):])
        root = self._mountpoint(name)
        try:
            root.mkdir(parents=True)
            for sub in ("fs", "vol"):
                (root / sub).mkdir()
            self._save_record(name, {
                "name": name, "driver": self.name, "redundancy": redundancy, "media": media,
                "nominal_size": nominal,
                "devices": [{"spec": s.path, "fault_domain": s.fault_domain} for s in specs],
            })
        except BaseException:
            remove_tree(root)
            raise
        return self.pool_info(name)

    def activate_pool(self, name) -> PoolInfo:
        """Nothing to mount: check the directory is there and report."""
        self._pool_root(name)
        return self.pool_info(name)

    def deactivate_pool(self, name) -> None:
        """Nothing to unmount; the pool stays readable on disk."""
        self._load_record(name)

    def destroy_pool(self, name) -> None:
        """Delete an empty pool (InUse if it holds file systems or volumes)."""
        self._load_record(name)
        held = [f"file system {n!r}" for n in self._list_names(name, "filesystem")]
        held += [f"volume {n!r}" for n in self._list_names(name, "volume")]
        if held:
            raise InUse(f"pool {name!r} is not empty: it holds {', '.join(held)}; "
                        "delete them first")
        remove_tree(self._mountpoint(name))
        self._record_path(name).unlink()

    def pool_info(self, name) -> PoolInfo:
        """Usage of the pool directory; size is the nominal size (or the file system's)."""
        rec = self._load_record(name)
        root = self._mountpoint(name)
        if not root.is_dir():
            return PoolInfo(name, self.name, str(root), rec["redundancy"], rec["media"], 0, 0,
                            0, "offline", [], self.capabilities()["features_off"])
        st = os.statvfs(root)
        fs_free = st.f_bavail * st.f_frsize
        used = tree_usage(root)
        size = rec.get("nominal_size") or st.f_blocks * st.f_frsize
        free = max(0, min(size - used, fs_free))
        devices = [{"path": None, "backing": None, "fault_domain": d["fault_domain"],
                    "size_bytes": parse_size(d["spec"][len(IMAGE_PREFIX):]),
                    "state": "online", "errors": 0} for d in rec["devices"]]
        return PoolInfo(name=name, driver=self.name, mountpoint=str(root),
                        redundancy=rec["redundancy"], media=rec["media"], size_bytes=size,
                        used_bytes=used, free_bytes=free, health="online",
                        devices=[DeviceInfo(**d) for d in devices],
                        features_off=self.capabilities()["features_off"])

    def scrub_pool(self, name, progress=None, should_cancel=None, throttle=None):
        """Off in this driver."""
        self._load_record(name)
        raise Unsupported(f"scrub is off: {FEATURES_OFF['scrub']}")

    # -- file systems ------------------------------------------------------------------
    def create_filesystem(self, pool, name, quota_bytes=None) -> FileSystemInfo:
        """Create directory ``fs/<name>`` with ``.snapshots/``; quotas are off."""
        path = self._object_dir(pool, "filesystem", name, must_exist=False)
        if quota_bytes is not None:
            validate_bytes(quota_bytes, "quota")
            raise Unsupported(f"quotas are off: {FEATURES_OFF['quotas']}")
        if path.exists():
            raise AlreadyExists(f"file system {name!r} already exists in pool {pool!r}")
        path.mkdir()
        (path / SNAPSHOTS_DIR).mkdir()
        return self.filesystem_info(pool, name)

    def set_filesystem_quota(self, pool, name, quota_bytes) -> None:
        """Only None (no quota) is accepted: quotas are off."""
        self._object_dir(pool, "filesystem", name)
        if quota_bytes is not None:
            validate_bytes(quota_bytes, "quota")
            raise Unsupported(f"quotas are off: {FEATURES_OFF['quotas']}")

    def filesystem_info(self, pool, name) -> FileSystemInfo:
        """Path and allocated bytes (snapshots not counted)."""
        path = self._object_dir(pool, "filesystem", name)
        return FileSystemInfo(pool=pool, name=name, path=str(path), quota_bytes=None,
                              used_bytes=tree_usage(path, skip=SNAPSHOTS_DIR))

    def list_filesystems(self, pool) -> list:
        """Names of the pool's file systems."""
        return self._list_names(pool, "filesystem")

    def delete_filesystem(self, pool, name) -> None:
        """Delete the directory and its snapshots."""
        self._remove_object(self._object_dir(pool, "filesystem", name))

    def _remove_object(self, path: Path) -> None:
        snaps = path / SNAPSHOTS_DIR
        if snaps.is_dir():
            for entry in snaps.iterdir():
                self._remove_snapshot(entry)
        remove_tree(path)

    # -- volumes -----------------------------------------------------------------------
    def create_volume(self, pool, name, size_bytes) -> VolumeInfo:
        """Create ``vol/<name>/data``, a sparse file of ``size_bytes``."""
        path = self._object_dir(pool, "volume", name, must_exist=False)
        validate_bytes(size_bytes, "volume size")
        if path.exists():
            raise AlreadyExists(f"volume {name!r} already exists in pool {pool!r}")
        try:
            (path / SNAPSHOTS_DIR).mkdir(parents=True)
            with open(path / DATA_FILE, "xb") as f:
                try:
                    f.truncate(size_bytes)
                except OSError as exc:
                    raise InvalidArgument(f"cannot make a volume of {size_bytes} bytes: "
                                          f"{exc.strerror}") from exc
        except BaseException:
            remove_tree(path)
            raise
        return self.volume_info(pool, name)

    def delete_volume(self, pool, name) -> None:
        """Delete the volume and its snapshots."""
        self._remove_object(self._object_dir(pool, "volume", name))

    # -- snapshots ---------------------------------------------------------------------
    def _copy_tree(self, src: Path, dst: Path) -> None:
        """Copy ``src`` to new directory ``dst`` (reflinks where possible, holes kept),
        leaving out ``.snapshots``."""
        dst.mkdir()
        for entry in src.iterdir():
            if entry.name == SNAPSHOTS_DIR:
                continue
            self.runner.run(["cp", "-a", "--reflink=auto", "--sparse=always", str(entry),
                             str(dst)])
        shutil.copystat(src, dst)

    def _make_readonly(self, root: Path) -> None:
        for p in _walk_all(root):
            if p.is_symlink():
                continue
            if not _set_immutable(p, True):
                mode = p.lstat().st_mode
                os.chmod(p, stat.S_IMODE(mode) & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    def _remove_snapshot(self, root: Path) -> None:
        if not root.exists():
            return
        for p in _walk_all(root):
            if p.is_symlink():
                continue
            _set_immutable(p, False)
            if p.is_dir():
                os.chmod(p, stat.S_IMODE(p.lstat().st_mode) | stat.S_IWUSR | stat.S_IXUSR)
        remove_tree(root)

    def _snapshot_info(self, pool, kind, source, name, path: Path) -> SnapshotInfo:
        return SnapshotInfo(pool=pool, kind=kind, source=source, name=name,
                            path=str(path / DATA_FILE if kind == "volume" else path),
                            created=path.lstat().st_mtime)

    def create_snapshot(self, pool, kind, source, name) -> SnapshotInfo:
        """Copy the source to ``<source>/.snapshots/<name>`` and make the copy read-only."""
        obj = self._object_dir(pool, validate_kind(kind), source)
        path = self._snapshot_dir(pool, kind, source, name, must_exist=False)
        if path.exists():
            raise AlreadyExists(f"snapshot {name!r} of {kind} {source!r} already exists")
        path.parent.mkdir(exist_ok=True)
        tmp = path.parent / f".incoming-{name}"
        remove_tree(tmp) if tmp.exists() else None
        try:
            self._copy_tree(obj, tmp)
            now = time.time()
            os.utime(tmp, (now, now))
            os.rename(tmp, path)
        except BaseException:
            self._remove_snapshot(tmp)
            raise
        self._make_readonly(path)
        return self._snapshot_info(pool, kind, source, name, path)

    def delete_snapshot(self, pool, kind, source, name) -> None:
        """Delete a snapshot (clones are independent copies)."""
        self._remove_snapshot(self._snapshot_dir(pool, validate_kind(kind), source, name))

    def list_snapshots(self, pool, kind, source) -> list:
        """The source's snapshots, oldest first."""
        obj = self._object_dir(pool, validate_kind(kind), source)
        snaps = obj / SNAPSHOTS_DIR
        found = []
        if snaps.is_dir():
            for e in snaps.iterdir():
                if e.is_dir() and not e.name.startswith("."):
                    found.append(self._snapshot_info(pool, kind, source, e.name, e))
        return sorted(found, key=lambda s: (s.created, s.name))

    def clone_snapshot(self, pool, kind, source, snapshot, new_name):
        """Writable copy of a snapshot as a new file system or volume."""
        snap = self._snapshot_dir(pool, validate_kind(kind), source, snapshot)
        new = self._object_dir(pool, kind, new_name, must_exist=False)
        if new.exists():
            raise AlreadyExists(f"{kind} {new_name!r} already exists in pool {pool!r}")
        try:
            self._copy_tree(snap, new)
            for p in _walk_all(new):  # the copy kept the snapshot's read-only modes
                if not p.is_symlink():
                    _set_immutable(p, False)
                    os.chmod(p, stat.S_IMODE(p.lstat().st_mode) | stat.S_IWUSR)
            (new / SNAPSHOTS_DIR).mkdir()
        except BaseException:
            self._remove_snapshot(new)
            raise
        if kind == "filesystem":
            return self.filesystem_info(pool, new_name)
        return self.volume_info(pool, new_name)

    def send_snapshot(self, pool, kind, source, snapshot, parent=None, parent_source=None):
        """Off in this driver."""
        self._snapshot_dir(pool, validate_kind(kind), source, snapshot)
        raise Unsupported(f"send/receive is off: {FEATURES_OFF['send_receive']}")

    def receive_snapshot(self, pool, kind, target, stream, name):
        """Off in this driver."""
        validate_kind(kind)
        validate_name(name, "snapshot name")
        self._pool_root(pool)
        raise Unsupported(f"send/receive is off: {FEATURES_OFF['send_receive']}")

    def rollback(self, pool, kind, name, snapshot):
        """Off in this driver."""
        self._snapshot_dir(pool, validate_kind(kind), name, snapshot)
        raise Unsupported(f"rollback is off: {FEATURES_OFF['rollback']}")

    def copy_snapshot(self, pool, kind, source, snapshot, target, name):
        """Off in this driver (a copy standing for an original only matters to streams)."""
        self._snapshot_dir(pool, validate_kind(kind), source, snapshot)
        raise Unsupported(f"send/receive is off: {FEATURES_OFF['send_receive']}")
