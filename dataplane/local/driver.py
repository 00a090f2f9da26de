"""The ``local`` driver: pools are btrfs file systems over block devices or image files.

File systems are subvolumes with qgroup quotas; each volume is a subvolume holding one sparse
file (``data``), so snapshots of both are read-only subvolume snapshots (instant whatever the
size), clones are writable snapshots, and ``btrfs send``/``receive`` carries them between
pools incrementally. Snapshots live inside their source at ``.snapshots/<name>``.

Failback support: ``send_snapshot`` may take its parent from another object (the received
snapshot a promoted clone came from), ``rollback`` resets live content to a snapshot in
place, and ``copy_snapshot`` makes a copy that ``btrfs receive`` accepts in place of the
original as the parent of incremental streams (its received UUID is set to the original's).
"""

import os
import secrets
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Optional

from . import btrfs
from .layout import DATA_FILE, remove_tree, tree_usage
from ..driver import (REDUNDANCY_MIN_DEVICES, SNAPSHOTS_DIR, FileSystemInfo, SnapshotInfo,
                     VolumeInfo, validate_bytes, validate_kind, validate_name)
from ..errors import (AlreadyExists, CommandFailed, InvalidArgument, NotFound,
                     Unsupported)
from .pools import LocalPoolsMixin
from .sendstream import StreamFilter

CHUNK = 1 << 20


class LocalDriver(LocalPoolsMixin):
    """btrfs pools on this machine (needs root, btrfs-progs and util-linux)."""

    name = "local"

    def capabilities(self) -> dict:
        """What the local driver does, as data."""
        return {
            "driver": self.name,
            "redundancy": list(REDUNDANCY_MIN_DEVICES),
            "min_devices": dict(REDUNDANCY_MIN_DEVICES),
            "media": ["flash", "capacity"],
            "quotas": True,
            "instant_snapshots": True,
            "readonly_snapshots": True,
            "send_receive": True,
            "scrub": True,
            "volumes": True,
            "filesystems": True,
            "clones": True,
            "rollback": True,
            # a clone shares extents but not lineage: its snapshot may be deleted freely
            "clones_depend_on_snapshot": False,
            "block_devices": True,
            "image_devices": True,
            "features_off": {},
        }

    def _is_snapshot(self, path: Path) -> bool:
        return btrfs.is_subvolume(path)

    def _quotas_on(self, pool: str) -> None:
        off = self._load_record(pool).get("features_off", {})
        if "quotas" in off:
            raise Unsupported(f"quotas are off in pool {pool!r}: {off['quotas']}")

    def _check_quota(self, pool: str, quota_bytes) -> Optional[int]:
        if quota_bytes is None:
            return None
        validate_bytes(quota_bytes, "quota")
        self._quotas_on(pool)
        size = self.pool_info(pool).size_bytes
        if quota_bytes > size:
            raise InvalidArgument(f"quota of {quota_bytes} bytes is larger than pool {pool!r} "
                                  f"({size} bytes): give a smaller quota or grow the pool")
        return quota_bytes

    def _delete_subvolume_tree(self, path: Path) -> None:
        """Delete a subvolume and every subvolume nested in it, deepest first."""
        for sub in btrfs.child_subvolumes(self.runner, path):
            if sub["path"] != path and btrfs.is_subvolume(sub["path"]):
                self._delete_subvolume_tree(sub["path"])
        btrfs.subvolume_delete(self.runner, path)

    # -- file systems ------------------------------------------------------------------
    def create_filesystem(self, pool, name, quota_bytes=None) -> FileSystemInfo:
        """Create a subvolume ``fs/<name>`` (with ``.snapshots/``) and its quota."""
        path = self._object_dir(pool, "filesystem", name, must_exist=False)
        quota = self._check_quota(pool, quota_bytes)
        if path.exists():
            raise AlreadyExists(f"file system {name!r} already exists in pool {pool!r}")
        btrfs.subvolume_create(self.runner, path)
        try:
            (path / SNAPSHOTS_DIR).mkdir()
            if quota is not None:
                btrfs.qgroup_limit(self.runner, path, quota)
        except BaseException:
            btrfs.subvolume_delete(self.runner, path)
            raise
        return self.filesystem_info(pool, name)

    def set_filesystem_quota(self, pool, name, quota_bytes) -> None:
        """Set the file system's qgroup limit (None removes it)."""
        path = self._object_dir(pool, "filesystem", name)
        quota = self._check_quota(pool, quota_bytes)
        if quota is None and "quotas" in self._load_record(pool).get("features_off", {}):
            return
        btrfs.qgroup_limit(self.runner, path, quota)

    def filesystem_info(self, pool, name) -> FileSystemInfo:
        """Path, quota and referenced bytes (from qgroups) of a file system."""
        path = self._object_dir(pool, "filesystem", name)
        if "quotas" in self._load_record(pool).get("features_off", {}):
            used, quota = tree_usage(path, skip=SNAPSHOTS_DIR), None
        else:
            used, quota = btrfs.qgroup_usage(self.runner, path)
        return FileSystemInfo(pool=pool, name=name, path=str(path), quota_bytes=quota,
                              used_bytes=used)

    def list_filesystems(self, pool) -> list:
        """Names of the pool's file systems."""
        return self._list_names(pool, "filesystem")

    def delete_filesystem(self, pool, name) -> None:
        """Delete the file system's subvolume and its snapshots."""
        self._delete_subvolume_tree(self._object_dir(pool, "filesystem", name))

    # -- volumes -----------------------------------------------------------------------
    def create_volume(self, pool, name, size_bytes) -> VolumeInfo:
        """Create subvolume ``vol/<name>`` holding a sparse file of ``size_bytes``."""
        path = self._object_dir(pool, "volume", name, must_exist=False)
        validate_bytes(size_bytes, "volume size")
        if path.exists():
            raise AlreadyExists(f"volume {name!r} already exists in pool {pool!r}")
        btrfs.subvolume_create(self.runner, path)
        try:
            (path / SNAPSHOTS_DIR).mkdir()
            with open(path / DATA_FILE, "xb") as f:
                try:
                    f.truncate(size_bytes)
                except OSError as exc:
                    raise InvalidArgument(f"cannot make a volume of {size_bytes} bytes: "
                                          f"{exc.strerror}") from exc
        except BaseException:
            self._delete_subvolume_tree(path)
            raise
        return self.volume_info(pool, name)

    def delete_volume(self, pool, name) -> None:
        """Delete the volume's subvolume and its snapshots."""
        self._delete_subvolume_tree(self._object_dir(pool, "volume", name))

    # -- snapshots ---------------------------------------------------------------------
    def _snapshot_info(self, pool, kind, source, name, path: Path) -> SnapshotInfo:
        return SnapshotInfo(pool=pool, kind=kind, source=source, name=name,
                            path=str(path / DATA_FILE if kind == "volume" else path),
                            created=path.lstat().st_ctime)

    def create_snapshot(self, pool, kind, source, name) -> SnapshotInfo:
        """Read-only subvolume snapshot at ``<source>/.snapshots/<name>`` (instant)."""
        validate_kind(kind)
        obj = self._object_dir(pool, kind, source)
        path = self._snapshot_dir(pool, kind, source, name, must_exist=False)
        if path.exists():
            raise AlreadyExists(f"snapshot {name!r} of {kind} {source!r} already exists")
        path.parent.mkdir(exist_ok=True)
        btrfs.snapshot(self.runner, obj, path, readonly=True)
        return self._snapshot_info(pool, kind, source, name, path)

    def delete_snapshot(self, pool, kind, source, name) -> None:
        """Delete a snapshot (clones do not depend on it)."""
        btrfs.subvolume_delete(self.runner, self._snapshot_dir(pool, kind, source, name))

    def list_snapshots(self, pool, kind, source) -> list:
        """The source's snapshots, oldest first (by subvolume id, i.e. creation order)."""
        obj = self._object_dir(pool, validate_kind(kind), source)
        result = []
        for sub in btrfs.child_subvolumes(self.runner, obj):
            path = sub["path"]
            if path.parent != obj / SNAPSHOTS_DIR or path.name.startswith("."):
                continue
            info = self._snapshot_info(pool, kind, source, path.name, path)
            if sub.get("otime"):
                info.created = sub["otime"]
            result.append(info)
        return result

    def clone_snapshot(self, pool, kind, source, snapshot, new_name):
        """Writable snapshot of a snapshot as a new file system or volume."""
        snap = self._snapshot_dir(pool, validate_kind(kind), source, snapshot)
        new = self._object_dir(pool, kind, new_name, must_exist=False)
        if new.exists():
            raise AlreadyExists(f"{kind} {new_name!r} already exists in pool {pool!r}")
        btrfs.snapshot(self.runner, snap, new, readonly=False)
        self._reset_snapshots_dir(new)
        if kind == "filesystem":
            return self.filesystem_info(pool, new_name)
        return self.volume_info(pool, new_name)

    @staticmethod
    def _reset_snapshots_dir(obj: Path) -> None:
        """A snapshot shows its source's snapshots as empty placeholder directories: drop
        them so the new object starts with no snapshots."""
        snaps = obj / SNAPSHOTS_DIR
        if snaps.is_dir():
            for entry in snaps.iterdir():
                if entry.is_dir() and not any(entry.iterdir()):
                    entry.rmdir()
        snaps.mkdir(exist_ok=True)

    # -- send / receive ----------------------------------------------------------------
    def send_snapshot(self, pool, kind, source, snapshot, parent=None,
                      parent_source=None) -> Iterator[bytes]:
        """Stream of ``btrfs send`` (incremental from ``parent``, a snapshot of ``source`` or
        of ``parent_source``). Arguments are checked now; bytes flow as the iterator is
        consumed. A parent that was itself received is named in the stream by its received
        UUID (the kernel does this), so the stream applies where the original lives."""
        return self._stream(self._send_argv(pool, kind, source, snapshot, parent,
                                            parent_source))

    def _send_argv(self, pool, kind, source, snapshot, parent, parent_source=None,
                   flags=()) -> list:
        snap = self._snapshot_dir(pool, validate_kind(kind), source, snapshot)
        if parent is None:
            return ["btrfs", "send", "-q", *flags, str(snap)]
        base_of = parent_source or source
        if parent == snapshot and base_of == source:
            raise InvalidArgument("the parent of an incremental send must be an older "
                                  "snapshot, not the snapshot itself")
        base = self._snapshot_dir(pool, kind, base_of, parent)
        if not (os.path.ismount(snap) or os.path.ismount(base)):
            return ["btrfs", "send", "-q", *flags, "-p", str(base), str(snap)]
        # An NFS export bind-mounts snapshots onto themselves, and `btrfs send` resolves the
        # parent relative to the mount that holds the snapshot ("not on mount point"). Send
        # through a non-recursive bind of the pool's top level made in a private mount
        # namespace: it shows no bind mounts and vanishes with the process.
        root, alt = self._mountpoint(pool), self.state_dir / ".send-root"
        alt.mkdir(exist_ok=True)
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(root), str(alt),
                "btrfs", "send", "-q", *flags, "-p", str(alt / base.relative_to(root)),
                str(alt / snap.relative_to(root))]

    def changed_since(self, pool, kind, name, snapshot) -> list:
        """Paths of ``name`` created, written, removed, renamed or re-permissioned since its
        snapshot ``snapshot``: a metadata-only ``btrfs send`` (``--no-data``) of a probe
        snapshot taken now, incremental on ``snapshot``, read back by ``btrfs receive
        --dump``. The probe is deleted again."""
        self._snapshot_dir(pool, validate_kind(kind), name, snapshot)  # NotFound first
        probe = f"changed-probe-{secrets.token_hex(6)}"
        self.create_snapshot(pool, kind, name, probe)
        try:
            stream = b"".join(self._stream(self._send_argv(
                pool, kind, name, probe, snapshot, flags=["--no-data"])))
            dump = self.runner.run(["btrfs", "receive", "--dump"], input=stream).stdout
        finally:
            self.delete_snapshot(pool, kind, name, probe)
        return btrfs.changed_paths(dump, skip=SNAPSHOTS_DIR)

    def _stream(self, argv) -> Iterator[bytes]:
        err = tempfile.TemporaryFile()
        proc = self.runner.popen(argv, stdout=subprocess.PIPE, stderr=err)
        try:
            while True:
                chunk = proc.stdout.read(CHUNK)
                if not chunk:
                    break
                yield chunk
            rc = proc.wait()
            if rc != 0:
                err.seek(0)
                raise CommandFailed(argv, rc, err.read().decode(errors="replace"))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            err.close()

    def receive_snapshot(self, pool, kind, target, stream: Iterable[bytes],
                         name) -> SnapshotInfo:
        """Apply a send stream as snapshot ``name`` of ``target``. A missing target is
        created from the received snapshot. A truncated or corrupt stream raises
        InvalidArgument and leaves nothing behind."""
        validate_kind(kind)
        validate_name(name, "snapshot name")
        tdir = self._object_dir(pool, kind, target, must_exist=False)
        created_target = False
        if not tdir.exists():
            btrfs.subvolume_create(self.runner, tdir)
            (tdir / SNAPSHOTS_DIR).mkdir()
            created_target = True
        snaps = tdir / SNAPSHOTS_DIR
        final = snaps / name
        incoming = snaps / f".incoming-{secrets.token_hex(6)}"
        try:
            if final.exists():
                raise AlreadyExists(f"snapshot {name!r} of {kind} {target!r} already exists")
            snaps.mkdir(exist_ok=True)
            self._receive_into(snaps, incoming.name, stream)
            os.rename(incoming, final)
            if created_target:
                self._fill_from_snapshot(final, tdir)
        except BaseException:
            if btrfs.is_subvolume(incoming):
                btrfs.subvolume_delete(self.runner, incoming)
            elif incoming.exists():
                remove_tree(incoming)
            if created_target:
                self._delete_subvolume_tree(tdir)
            raise
        return self._snapshot_info(pool, kind, target, name, final)

    def _receive_into(self, directory: Path, subvol_name: str, stream) -> None:
        argv = ["btrfs", "receive", str(directory)]
        filt = StreamFilter(subvol_name)
        err = tempfile.TemporaryFile()
        proc = self.runner.popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=err)
        try:
            broken = False
            try:
                for chunk in stream:
                    data = filt.feed(bytes(chunk))
                    if data and not broken:
                        try:
                            proc.stdin.write(data)
                        except BrokenPipeError:
                            broken = True
            finally:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
            rc = proc.wait()
            err.seek(0)
            stderr = err.read().decode(errors="replace")
            if rc != 0:
                if "parent" in stderr.lower() and filt.incremental:
                    raise NotFound("the parent snapshot of this incremental stream is not in "
                                   f"this pool: receive the full stream first ({stderr.strip()})")
                filt.check_complete()
                raise InvalidArgument(f"btrfs receive rejected the stream: {stderr.strip()}")
            filt.check_complete()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.close()

    # -- rollback and re-basing (failback) ---------------------------------------------
    def rollback(self, pool, kind, name, snapshot):
        """A volume's ``data`` is cloned from the snapshot in place (FICLONE: same inode). A
        file system's entries are reflink-copied from the snapshot into a hidden staging
        directory in the same subvolume, the old entries removed and the copies renamed in:
        the subvolume (its mount, NFS binds, qgroup and ``.snapshots``) stays. A run cut
        short leaves a ``.rollback-*`` directory that the next run removes first."""
        obj = self._object_dir(pool, validate_kind(kind), name)
        snap = self._snapshot_dir(pool, kind, name, snapshot)
        if kind == "volume":
            btrfs.clone_file_into(snap / DATA_FILE, obj / DATA_FILE)
            return self.volume_info(pool, name)
        for leftover in obj.glob(".rollback-*"):
            remove_tree(leftover)
        staging = obj / f".rollback-{secrets.token_hex(6)}"
        staging.mkdir()
        try:
            for entry in snap.iterdir():
                if entry.name != SNAPSHOTS_DIR:
                    self.runner.run(["cp", "-a", "--reflink=always", str(entry), str(staging)])
        except BaseException:
            remove_tree(staging)  # the live content is untouched so far
            raise
        for entry in obj.iterdir():
            if entry.name not in (SNAPSHOTS_DIR, staging.name):
                remove_tree(entry)
        for entry in staging.iterdir():
            os.rename(entry, obj / entry.name)
        staging.rmdir()
        st = snap.stat()
        os.chown(obj, st.st_uid, st.st_gid)
        os.chmod(obj, st.st_mode & 0o7777)
        os.utime(obj, ns=(st.st_atime_ns, st.st_mtime_ns))
        return self.filesystem_info(pool, name)

    def copy_snapshot(self, pool, kind, source, snapshot, target, name) -> SnapshotInfo:
        """A writable snapshot of the original, marked as received from the UUID that
        streams based on the original name (its received UUID, else its UUID), then set
        read-only: ``btrfs receive`` finds it as the parent of those streams."""
        src = self._snapshot_dir(pool, validate_kind(kind), source, snapshot)
        validate_name(name, "snapshot name")
        tdir = self._object_dir(pool, kind, target)
        final = tdir / SNAPSHOTS_DIR / name
        if final.exists():
            raise AlreadyExists(f"snapshot {name!r} of {kind} {target!r} already exists")
        info = btrfs.subvolume_show(self.runner, src)
        tmp = tdir / SNAPSHOTS_DIR / f".incoming-{secrets.token_hex(6)}"
        tmp.parent.mkdir(exist_ok=True)
        btrfs.snapshot(self.runner, src, tmp, readonly=False)
        try:
            btrfs.set_received_uuid(tmp, info["received_uuid"] or info["uuid"],
                                    info["generation"])
            btrfs.set_readonly(self.runner, tmp, True)
            os.rename(tmp, final)
        except BaseException:
            btrfs.subvolume_delete(self.runner, tmp)
            raise
        return self._snapshot_info(pool, kind, target, name, final)

    def _fill_from_snapshot(self, snap: Path, target: Path) -> None:
        """Make a new target's live content equal to a received snapshot (reflinks)."""
        for entry in snap.iterdir():
            if entry.name == SNAPSHOTS_DIR:
                continue
            self.runner.run(["cp", "-a", "--reflink=always", str(entry), str(target)])
