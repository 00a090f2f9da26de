"""What the local and directory drivers share: pool records, the on-pool layout, lookups.

Layout of a pool mounted (or, for the directory driver, kept) at ``<state_dir>/pools/<pool>``::

    fs/<name>/                      a file system
    fs/<name>/.snapshots/<snap>/    its read-only snapshots (seen there over NFS/SMB too)
    vol/<name>/data                 a volume's bytes (sparse file)
    vol/<name>/.snapshots/<snap>/data
    .staging/                       half-made objects, removed on failure

and its record at ``<state_dir>/pools/<pool>.json``.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Optional

from plumbing.atomic import write_json_atomic

from ..driver import (MEDIA, REDUNDANCY_MIN_DEVICES, SNAPSHOTS_DIR, DeviceSpec, Driver, VolumeInfo,
                     validate_bytes, validate_kind, validate_name)
from ..errors import AlreadyExists, InvalidArgument, NotFound

DATA_FILE = "data"


class BaseDriver(Driver):
    """Record keeping and path helpers shared by the file-based drivers."""

    # -- file systems' access ----------------------------------------------------------
    def set_filesystem_access(self, pool, name, uid=None, gid=None, mode=None) -> None:
        path = self.filesystem_info(pool, name).path
        if uid is not None or gid is not None:
            os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        if mode is not None:
            if not 0 <= mode <= 0o7777:
                raise InvalidArgument(f"mode {mode:o} is not a permission mode (0000..7777)")
            os.chmod(path, mode)

    # -- records -----------------------------------------------------------------------
    def _record_path(self, pool: str) -> Path:
        return self.pools_dir / f"{pool}.json"

    def _mountpoint(self, pool: str) -> Path:
        return self.pools_dir / pool

    def _load_record(self, pool: str) -> dict:
        validate_name(pool, "pool name")
        path = self._record_path(pool)
        try:
            with open(path) as f:
                record = json.load(f)
        except FileNotFoundError:
            raise NotFound(f"pool {pool!r} does not exist") from None
        except (OSError, ValueError) as exc:
            raise InvalidArgument(f"pool record {path} is unreadable: {exc}") from exc
        if record.get("driver") != self.name:
            raise NotFound(f"pool {pool!r} does not exist in the {self.name} driver (it belongs "
                           f"to the {record.get('driver')!r} driver)")
        return record

    def _save_record(self, pool: str, record: dict) -> None:
        """Write the record atomically and durably."""
        write_json_atomic(self._record_path(pool), record, mode=0o600, indent=2, sort_keys=True)

    def list_pools(self) -> list:
        """Names of the pools this driver has records for, sorted."""
        if not self.pools_dir.is_dir():
            return []
        names = []
        for entry in self.pools_dir.iterdir():
            if entry.is_file() and entry.name.endswith(".json") and not entry.name.startswith("."):
                try:
                    rec = json.loads(entry.read_text())
                except (OSError, ValueError):
                    continue
                if rec.get("driver") == self.name:
                    names.append(entry.name[: -len(".json")])
        return sorted(names)

    def _check_new_pool(self, name: str, devices, redundancy: str, media: str) -> list:
        """Validate create_pool's arguments; return the devices as DeviceSpec objects."""
        validate_name(name, "pool name")
        if redundancy not in REDUNDANCY_MIN_DEVICES:
            raise InvalidArgument(
                f"invalid redundancy {redundancy!r}: use one of "
                f"{', '.join(REDUNDANCY_MIN_DEVICES)}")
        if media not in MEDIA:
            raise InvalidArgument(f"invalid media {media!r}: use 'flash' or 'capacity'")
        if self._record_path(name).exists() or self._mountpoint(name).exists():
            raise AlreadyExists(f"pool {name!r} already exists")
        specs = []
        for dev in devices or []:
            if isinstance(dev, str):
                dev = DeviceSpec(dev)
            elif isinstance(dev, dict):
                dev = DeviceSpec(**dev)
            if not isinstance(dev, DeviceSpec) or not isinstance(dev.path, str) or not dev.path:
                raise InvalidArgument(f"invalid device {dev!r}: give a block device path or "
                                      "'image:SIZE'")
            specs.append(dev)
        return specs

    # -- paths -------------------------------------------------------------------------
    def _kind_dir(self, pool: str, kind: str) -> Path:
        return self._pool_root(pool) / ("fs" if validate_kind(kind) == "filesystem" else "vol")

    def _pool_root(self, pool: str) -> Path:
        """The active pool's root directory; drivers raise Offline/NotFound as needed."""
        raise NotImplementedError

    def _object_dir(self, pool: str, kind: str, name: str, must_exist: bool = True) -> Path:
        what = "file system" if kind == "filesystem" else "volume"
        validate_name(name, f"{what} name")
        path = self._kind_dir(pool, kind) / name
        if must_exist and not path.is_dir():
            raise NotFound(f"{what} {name!r} does not exist in pool {pool!r}")
        return path

    def _snapshot_dir(self, pool: str, kind: str, source: str, name: str,
                      must_exist: bool = True) -> Path:
        validate_name(name, "snapshot name")
        path = self._object_dir(pool, kind, source) / SNAPSHOTS_DIR / name
        if must_exist and not self._is_snapshot(path):
            raise NotFound(f"snapshot {name!r} of {kind} {source!r} does not exist "
                           f"in pool {pool!r}")
        return path

    def _is_snapshot(self, path: Path) -> bool:
        return path.is_dir()

    def _list_names(self, pool: str, kind: str) -> list:
        root = self._kind_dir(pool, kind)
        if not root.is_dir():
            return []
        return sorted(e.name for e in root.iterdir() if e.is_dir() and not e.name.startswith("."))

    def _snapshot_names(self, obj_dir: Path) -> list:
        snaps = obj_dir / SNAPSHOTS_DIR
        if not snaps.is_dir():
            return []
        found = []
        for e in snaps.iterdir():
            if e.name.startswith(".") or not self._is_snapshot(e):
                continue
            found.append((e.lstat().st_ctime, e.name))
        return [n for _, n in sorted(found)]

    @staticmethod
    def _data_path(obj_or_snap_dir: Path) -> Path:
        return obj_or_snap_dir / DATA_FILE

    # -- volumes: a sparse DATA_FILE in the volume's directory, whatever the driver -------
    def resize_volume(self, pool, name, size_bytes) -> VolumeInfo:
        """Grow the volume; a smaller size raises InvalidArgument."""
        data = self._object_dir(pool, "volume", name) / DATA_FILE
        validate_bytes(size_bytes, "volume size")
        current = data.stat().st_size
        if size_bytes < current:
            raise InvalidArgument(f"volume {name!r} is {current} bytes: shrinking to "
                                  f"{size_bytes} would destroy data and is refused")
        if size_bytes > current:
            try:
                os.truncate(data, size_bytes)
            except OSError as exc:
                raise InvalidArgument(f"cannot grow volume {name!r} to {size_bytes} bytes: "
                                      f"{exc.strerror}") from exc
        return self.volume_info(pool, name)

    def volume_info(self, pool, name) -> VolumeInfo:
        """Path of the data file, its size and allocated bytes."""
        data = self._object_dir(pool, "volume", name) / DATA_FILE
        st = data.stat()
        return VolumeInfo(pool=pool, name=name, path=str(data), size_bytes=st.st_size,
                          used_bytes=st.st_blocks * 512)

    def list_volumes(self, pool) -> list:
        """Names of the pool's volumes."""
        return self._list_names(pool, "volume")

    def _staging(self, pool: str) -> Path:
        path = self._pool_root(pool) / ".staging"
        path.mkdir(exist_ok=True)
        return path


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_tree(path: Path) -> None:
    """Remove a directory tree if it exists."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def tree_usage(path: Path, skip: Optional[str] = None) -> int:
    """Bytes allocated under ``path`` (st_blocks), skipping directories named ``skip``."""
    total = 0
    for root, dirs, files in os.walk(path):
        if skip and skip in dirs:
            dirs.remove(skip)
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total
