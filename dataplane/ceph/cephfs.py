"""File systems of ceph pools: directories of the cluster's one CephFS.

Layout in the CephFS (named ``strata`` unless the cluster already has one)::

    /strata/<pool>/                 a Strata pool: its file layout puts data in the pool's
                                    RADOS data pool (added to the CephFS as a data pool)
    /strata/<pool>/fs/<name>/       a file system, with ``ceph.quota.max_bytes`` as its quota
    /strata/<pool>/fs/<name>/.snap/<snap>   its snapshots (CephFS snapshots, read-only)
    /strata/<pool>/.staging/        half-made clones and received trees, removed on failure

Control operations (directories, quotas, pins, owners, snapshots with their metadata) go
through libcephfs (python3-cephfs) without a mount. The bytes are served at a local path, as
every driver's ``FileSystemInfo.path`` is: ``ceph-fuse`` mounts ``/strata/<pool>`` at the
pool's mountpoint with ``client_snapdir = .snapshots``, so snapshots appear where they do on
every pool (``<fs>/.snapshots/<snap>``) and Samba can share them. NFS-Ganesha reaches the
same directories through FSAL_CEPH, without the mount.

Each snapshot carries a ``strata.id`` (a UUID) in CephFS's snapshot metadata: a received
snapshot keeps the id of the one it was sent from, which is how an incremental stream finds
its parent on the other side (see :mod:`dataplane.ceph.treediff`).

Multi-active metadata: a directory can be pinned to an MDS rank (``ceph.dir.pin``); the
checkpoint service pins each job's directory to a rank, round-robin, so several MDS share a
checkpoint burst. :meth:`CephFileSystems.subtree_ranks` tells which rank serves what.
"""

import contextlib
import errno
import json
import os
import secrets
import shutil
import tempfile
import time
import uuid
import weakref
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from . import bindings, treediff
from ..driver import (SNAPSHOTS_DIR, FileSystemInfo, SnapshotInfo, validate_bytes,
                     validate_name)
from ..errors import (AlreadyExists, CommandFailed, InUse, InvalidArgument, NotFound,
                     Unreachable, Unsupported)
from ..mountguard import guard_mountpoint
from ..runner import Runner

ROOT = "/strata"
FS_DIR = "fs"
STAGING = ".staging"
SNAP_ID = "strata.id"
MOUNT_TIMEOUT = 30

FEATURES = {
    "quotas": True,
    "instant_snapshots": True,
    "readonly_snapshots": True,
    "clones": True,
    "rollback": True,
    "filesystems": True,
    "dir_pinning": True,
}
# what file systems on CephFS do differently, said once for capabilities()
NOTES = {
    "filesystem_clones": "a CephFS snapshot cannot be made writable: a clone is a full copy "
                         "of the snapshot (it does not depend on it afterwards)",
    "filesystem_quota_enforcement": "CephFS enforces quotas in its clients, within about a "
                                    "second of writes: a burst can overshoot by a few MiB",
}


def _b(path) -> bytes:
    return path.encode() if isinstance(path, str) else path


_open = weakref.WeakSet()   # instances holding a mounted libcephfs handle


def close_all() -> None:
    """Release every libcephfs handle of this process. Call it while the cluster still
    answers: a handle left to the garbage collector is shut down at interpreter exit, and
    against a cluster already gone its shutdown waits out ``client_shutdown_timeout``."""
    for fs in list(_open):
        fs.close()


def mount_state(where) -> str:
    """``mounted``; ``dead`` (a ceph-fuse mount whose daemon is gone: every access fails with
    ENOTCONN); or ``absent`` (the mountpoint is a plain directory, or missing)."""
    where = str(where)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if left.split()[4] == where and right.split()[0].startswith("fuse.ceph"):
                try:
                    os.stat(where)
                except OSError as exc:
                    if exc.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                        return "dead"
                    raise
                return "mounted"
    return "absent"


class CephFileSystems:
    """The file systems of the ceph pools of one cluster.

    ``conf`` is the cluster's ceph.conf, ``client`` the cephx user (``admin`` gives
    ``client.admin``), ``keyring`` its keyring when ceph.conf does not name it.
    ``mount_dir(pool)`` says where a pool is mounted and ``capacity(pool)`` its size in
    bytes (the driver knows both). The CephFS is created on first use when the cluster has
    none (``fs_name``, metadata pool ``<fs_name>-meta``, default data pool ``<fs_name>-data``).
    """

    def __init__(self, conf: str, client: str = "admin", keyring: Optional[str] = None,
                 mount_dir: Callable[[str], Path] = None, capacity: Callable[[str], int] = None,
                 run_dir: Optional[Path] = None, runner: Optional[Runner] = None,
                 fs_name: str = "strata"):
        self.conf = str(conf)
        self.client = client
        self.keyring = keyring
        self.mount_dir = mount_dir
        self.capacity = capacity
        self.run_dir = Path(run_dir) if run_dir else None
        self.runner = runner or Runner()
        self.fs_name = fs_name
        self._fs = None

    # -- connections ---------------------------------------------------------------------
    def _rados_conf(self) -> dict:
        return {"keyring": self.keyring} if self.keyring else {}

    def mon_command(self, prefix: str, **args) -> object:
        """Run a monitor command; its JSON answer (or None). Unreachable when no monitor
        answers, CommandFailed when it refuses."""
        rados = bindings.load("rados")
        cluster = rados.Rados(conffile=self.conf, name=f"client.{self.client}",
                              conf=self._rados_conf())
        try:
            cluster.connect(timeout=10)
        except rados.Error as exc:
            raise Unreachable(f"the Ceph cluster of {self.conf} does not answer: {exc}") from exc
        try:
            cmd = dict(args, prefix=prefix, format="json")
            rc, out, err = cluster.mon_command(json.dumps(cmd), b"", timeout=30)
        finally:
            cluster.shutdown()
        if rc != 0:
            raise CommandFailed(["ceph", prefix], rc, err)
        return json.loads(out) if out.strip() else None

    def _ensure_cephfs(self) -> str:
        """The name of the cluster's CephFS, made now if it has none."""
        existing = self.mon_command("fs ls") or []
        if existing:
            return existing[0]["name"]
        meta, data = f"{self.fs_name}-meta", f"{self.fs_name}-data"
        for pool, pgs in ((meta, 8), (data, 8)):
            self.mon_command("osd pool create", pool=pool, pg_num=pgs)
            self.mon_command("osd pool application enable", pool=pool, app="cephfs")
        self.mon_command("fs new", fs_name=self.fs_name, metadata=meta, data=data)
        # a client that dies holding capabilities (a killed NFS server) blocks others'
        # access to those files until its session is closed: 300 s by default (the
        # least Ceph allows is 30 s)
        # and every MDS daemon may be active (max_mds 2 with 2 daemons): no standby is
        # wanted, else the cluster stays HEALTH_WARN (MDS_INSUFFICIENT_STANDBY)
        for var, val in (("session_timeout", "30"), ("session_autoclose", "45"),
                         ("standby_count_wanted", "0")):
            self.mon_command("fs set", fs_name=self.fs_name, var=var, val=val)
        self.set_max_mds(2)
        self._wait_active()
        return self.fs_name

    def set_max_mds(self, count: int) -> None:
        """Let ``count`` MDS daemons be active at once (the others stay standby)."""
        self.mon_command("fs set", fs_name=self.filesystem_name(), var="max_mds",
                         val=str(count))

    def filesystem_name(self) -> str:
        """The cluster's CephFS (the first one ``fs ls`` names)."""
        existing = self.mon_command("fs ls") or []
        if not existing:
            raise NotFound("the Ceph cluster has no CephFS yet")
        return existing[0]["name"]

    def _wait_active(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dump = self.mon_command("fs dump")
            for fs in dump.get("filesystems", []):
                infos = fs["mdsmap"].get("info", {}).values()
                if any(i.get("state") == "up:active" for i in infos):
                    return
            time.sleep(0.5)
        raise Unreachable("the CephFS has no active MDS: start a ceph-mds daemon")

    @property
    def fs(self):
        """A libcephfs handle mounted at the CephFS root (made on first use)."""
        if self._fs is None:
            cephfs = bindings.load("cephfs")
            name = self._ensure_cephfs()
            handle = cephfs.LibCephFS(conffile=self.conf, auth_id=self.client)
            if self.keyring:
                handle.conf_set("keyring", self.keyring)
            handle.conf_set("client_mount_timeout", "20")
            try:
                handle.mount(filesystem_name=name.encode())
            except cephfs.Error as exc:
                handle.shutdown()
                raise Unreachable(f"cannot mount CephFS {name!r}: {exc}") from exc
            self._fs = handle
            _open.add(self)
        return self._fs

    def close(self) -> None:
        """Release the libcephfs handle."""
        if self._fs is not None:
            with contextlib.suppress(Exception):
                self._fs.shutdown()
            self._fs = None
        _open.discard(self)

    def _exists(self, path: str) -> bool:
        cephfs = bindings.load("cephfs")
        try:
            self.fs.stat(_b(path))
            return True
        except cephfs.ObjectNotFound:
            return False

    def _evict_sessions(self, chosen) -> list:
        """Close the MDS sessions for which ``chosen(client_metadata)`` is true, on every
        active rank (the MDS blocklists what it evicts); the client ids."""
        evicted = []
        for rank in self.active_ranks():
            rc, out, _err = self.fs.mds_command(str(rank), json.dumps(
                {"prefix": "session ls", "format": "json"}), b"")
            if rc != 0:
                continue
            for session in json.loads(out):
                if not chosen(session.get("client_metadata", {})):
                    continue
                self.fs.mds_command(str(rank), json.dumps(
                    {"prefix": "session evict", "filters": [f"id={session['id']}"]}), b"")
                evicted.append(session["id"])
        return evicted

    def evict_dead_local_clients(self) -> list:
        """Close the sessions of clients of this host whose process is gone (an NFS server
        that exited without unmounting its libcephfs): the capabilities they held are
        released now rather than when the MDS gives up on them. Returns the client ids."""
        host = os.uname().nodename

        def dead_here(meta: dict) -> bool:
            pid = meta.get("pid")
            return (meta.get("hostname") == host and bool(pid)
                    and not os.path.exists(f"/proc/{pid}"))
        return self._evict_sessions(dead_here)

    def evict_clients(self, entity: str) -> list:
        """Close the MDS sessions of every client authenticated as cephx ``entity``
        (``client.X`` or ``X``): a dead cluster node's NFS server, whose capabilities would
        otherwise hold other clients' access to its files until the MDS gives up on it
        (``session_autoclose``: 300 s by default). Returns the client ids."""
        wanted = entity.removeprefix("client.")
        return self._evict_sessions(lambda meta: meta.get("entity_id") == wanted)

    # -- pools ---------------------------------------------------------------------------
    def pool_root(self, pool: str) -> str:
        """The pool's directory in the CephFS."""
        return f"{ROOT}/{validate_name(pool, 'pool name')}"

    def attach_pool(self, pool: str, data_pool: str) -> None:
        """Give pool ``pool`` its directory, with file data going to RADOS pool
        ``data_pool`` (made a data pool of the CephFS)."""
        name = self._ensure_cephfs()
        self.mon_command("fs add_data_pool", fs_name=name, pool=data_pool)
        root = self.pool_root(pool)
        self.fs.mkdirs(_b(root), 0o755)
        self.fs.setxattr(_b(root), "ceph.dir.layout.pool", data_pool.encode(), 0)
        for sub in (FS_DIR, STAGING):
            self.fs.mkdirs(_b(f"{root}/{sub}"), 0o755 if sub == FS_DIR else 0o700)

    def detach_pool(self, pool: str, data_pool: str) -> None:
        """Remove the pool's directory (InUse while it holds file systems) and take
        ``data_pool`` off the CephFS."""
        if self.list_filesystems(pool, mounted=False):
            raise InUse(f"pool {pool!r} still holds file systems: delete them first")
        root = self.pool_root(pool)
        self.unmount(pool)
        cephfs = bindings.load("cephfs")
        for sub in (f"{root}/{FS_DIR}", f"{root}/{STAGING}", root):
            with contextlib.suppress(cephfs.ObjectNotFound):
                self._rmtree_lib(sub)
        with contextlib.suppress(CommandFailed):
            self.mon_command("fs rm_data_pool", fs_name=self.filesystem_name(), pool=data_pool)

    def _rmtree_lib(self, path: str) -> None:
        d = self.fs.opendir(_b(path))
        try:
            entries = []
            while True:
                e = self.fs.readdir(d)
                if e is None:
                    break
                if e.d_name not in (b".", b".."):
                    entries.append((e.d_name, e.is_dir()))
        finally:
            self.fs.closedir(d)
        for name, is_dir in entries:
            child = f"{path}/{name.decode()}"
            if is_dir:
                self._rmtree_lib(child)
            else:
                self.fs.unlink(_b(child))
        self.fs.rmdir(_b(path))

    # -- the ceph-fuse mount -------------------------------------------------------------
    def mount_state(self, pool: str) -> str:
        """The pool's ceph-fuse mount: see :func:`mount_state`."""
        return mount_state(self.mount_dir(pool))

    def is_mounted(self, pool: str) -> bool:
        """Whether the pool's mountpoint is a live ceph-fuse mount now."""
        return self.mount_state(pool) == "mounted"

    def mount(self, pool: str) -> Path:
        """Mount the pool's directory at its mountpoint with ceph-fuse (once); a dead mount
        (its ceph-fuse was killed) is taken off first. The mountpoint directory itself is
        immutable: while nothing is mounted there, nothing can be written into it (it would
        land on the disk below and vanish from view once the pool is mounted again)."""
        where = Path(self.mount_dir(pool))
        state = self.mount_state(pool)
        if state == "mounted":
            return where
        if state == "dead":
            self.runner.run(["umount", "-l", str(where)], check=False)
        where.mkdir(parents=True, exist_ok=True)
        guard_mountpoint(self.runner, where)
        argv = ["ceph-fuse", "-c", self.conf, "--id", self.client,
                "-r", self.pool_root(pool), f"--client_snapdir={SNAPSHOTS_DIR}",
                "--client_quota_df=true", "--fuse_default_permissions=true"]
        if self.keyring:
            argv += ["--keyring", self.keyring]
        if self.run_dir:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            argv += ["--pid-file", str(self.run_dir / f"ceph-fuse-{pool}.pid"),
                     "--log-file", str(self.run_dir / f"ceph-fuse-{pool}.log")]
        argv.append(str(where))
        try:
            self.runner.run(argv, timeout=MOUNT_TIMEOUT)
        except CommandFailed as exc:
            raise Unreachable(f"ceph-fuse could not mount pool {pool!r} at {where}: "
                              f"{exc}") from exc
        if not self.is_mounted(pool):
            raise Unreachable(f"ceph-fuse did not mount pool {pool!r} at {where}")
        return where

    def unmount(self, pool: str) -> None:
        """Unmount the pool's ceph-fuse mount (its ceph-fuse process then ends), a dead one
        too."""
        state = self.mount_state(pool)
        if state == "absent":
            return
        where = str(self.mount_dir(pool))
        proc = self.runner.run(["umount", where], check=False) if state == "mounted" else None
        if proc is None or proc.returncode != 0:
            self.runner.run(["umount", "-l", where], check=False)

    # -- file systems --------------------------------------------------------------------
    def _fs_path(self, pool: str, name: str) -> str:
        return f"{self.pool_root(pool)}/{FS_DIR}/{validate_name(name, 'file system name')}"

    def _local(self, pool: str, name: str) -> Path:
        return Path(self.mount_dir(pool)) / FS_DIR / name

    def _require(self, pool: str, name: str) -> str:
        path = self._fs_path(pool, name)
        if not self._exists(path):
            raise NotFound(f"file system {name!r} does not exist in pool {pool!r}")
        return path

    def _check_quota(self, pool: str, quota_bytes) -> Optional[int]:
        if quota_bytes is None:
            return None
        validate_bytes(quota_bytes, "quota")
        size = self.capacity(pool) if self.capacity else None
        if size and quota_bytes > size:
            raise InvalidArgument(f"quota of {quota_bytes} bytes is larger than pool {pool!r} "
                                  f"({size} bytes)")
        return quota_bytes

    def create_filesystem(self, pool: str, name: str,
                          quota_bytes: Optional[int] = None) -> FileSystemInfo:
        """A directory with an optional quota (``ceph.quota.max_bytes``)."""
        path = self._fs_path(pool, name)
        quota_bytes = self._check_quota(pool, quota_bytes)
        if self._exists(path):
            raise AlreadyExists(f"file system {name!r} already exists in pool {pool!r}")
        self.fs.mkdir(_b(path), 0o755)
        if quota_bytes:
            self._set_quota(path, quota_bytes)
        return self.filesystem_info(pool, name)

    def _set_quota(self, path: str, quota_bytes: Optional[int]) -> None:
        value = str(quota_bytes or 0).encode()
        local = self._local_of(path)
        if local is not None:
            # through the mount when there is one: the client that writes the bytes knows
            # the new limit at once (others learn it from the MDS within a second)
            os.setxattr(local, "ceph.quota.max_bytes", value)
        else:
            self.fs.setxattr(_b(path), "ceph.quota.max_bytes", value, 0)

    def _local_of(self, path: str) -> Optional[str]:
        """The mounted local path of a CephFS path under a pool root, or None."""
        parts = path[len(ROOT) + 1:].split("/", 1) if path.startswith(ROOT + "/") else []
        if not parts or self.mount_dir is None or not self.is_mounted(parts[0]):
            return None
        return os.path.join(self.mount_dir(parts[0]), *parts[1:])

    def set_filesystem_quota(self, pool: str, name: str, quota_bytes: Optional[int]) -> None:
        """Set or (None) remove the quota."""
        path = self._require(pool, name)
        self._set_quota(path, self._check_quota(pool, quota_bytes))

    def _xattr_int(self, path: str, key: str) -> int:
        cephfs = bindings.load("cephfs")
        try:
            return int(float(self.fs.getxattr(_b(path), key).decode() or 0))
        except cephfs.NoData:
            return 0

    def filesystem_info(self, pool: str, name: str) -> FileSystemInfo:
        """Path (on the pool's mount), quota and recursive bytes (``ceph.dir.rbytes``)."""
        path = self._require(pool, name)
        quota = self._xattr_int(path, "ceph.quota.max_bytes") or None
        return FileSystemInfo(pool=pool, name=name, path=str(self._local(pool, name)),
                              quota_bytes=quota,
                              used_bytes=self._xattr_int(path, "ceph.dir.rbytes"))

    def set_filesystem_access(self, pool, name, uid=None, gid=None, mode=None) -> None:
        """Owner, group and mode of the file system's root (None: keep)."""
        path = self._require(pool, name)
        if mode is not None and not 0 <= mode <= 0o7777:
            raise InvalidArgument(f"mode {mode:o} is not a permission mode (0000..7777)")
        if uid is not None or gid is not None:
            st = self.fs.stat(_b(path))
            self.fs.chown(_b(path), st.st_uid if uid is None else uid,
                          st.st_gid if gid is None else gid)
        if mode is not None:
            self.fs.chmod(_b(path), mode)

    def _listdir(self, path: str) -> list:
        d = self.fs.opendir(_b(path))
        names = []
        try:
            while True:
                e = self.fs.readdir(d)
                if e is None:
                    break
                if e.d_name not in (b".", b".."):
                    names.append(e.d_name.decode())
        finally:
            self.fs.closedir(d)
        return sorted(names)

    def list_filesystems(self, pool: str, mounted: bool = True) -> list:
        """Names of the pool's file systems."""
        cephfs = bindings.load("cephfs")
        try:
            return [n for n in self._listdir(f"{self.pool_root(pool)}/{FS_DIR}")
                    if not n.startswith(".")]
        except cephfs.ObjectNotFound:
            return []

    def delete_filesystem(self, pool: str, name: str) -> None:
        """Delete the file system's snapshots, then its tree."""
        path = self._require(pool, name)
        for snap in self._snapshot_names(path):
            self.fs.rmsnap(_b(path), _b(snap))
        self._set_quota(path, None)
        local = self._local(pool, name)
        if self.is_mounted(pool):
            shutil.rmtree(local)   # through the mount: the bulk of a tree goes faster there
        else:
            self._rmtree_lib(path)

    # -- snapshots -----------------------------------------------------------------------
    def _snapshot_names(self, path: str) -> list:
        # a directory also lists its ancestors' snapshots as "_<name>_<ino>"
        return [n for n in self._listdir(f"{path}/.snap") if not n.startswith("_")]

    def _snap_meta(self, path: str, snap: str) -> tuple:
        """(strata id, creation time) of a snapshot."""
        snap_path = f"{path}/.snap/{snap}"
        info = self.fs.snap_info(_b(snap_path))
        created = float(self.fs.getxattr(_b(snap_path), "ceph.snap.btime").decode())
        return info.get("metadata", {}).get(SNAP_ID, f"ceph-snapid-{info['id']}"), created

    def _require_snapshot(self, pool: str, name: str, snap: str) -> str:
        path = self._require(pool, name)
        validate_name(snap, "snapshot name")
        if snap not in self._snapshot_names(path):
            raise NotFound(f"snapshot {snap!r} of filesystem {name!r} does not exist in "
                           f"pool {pool!r}")
        return path

    def _snapshot_info(self, pool, name, snap, created) -> SnapshotInfo:
        return SnapshotInfo(pool=pool, kind="filesystem", source=name, name=snap,
                            path=str(self._local(pool, name) / SNAPSHOTS_DIR / snap),
                            created=created)

    def create_snapshot(self, pool: str, name: str, snap: str,
                        snap_id: Optional[str] = None) -> SnapshotInfo:
        """A CephFS snapshot of the file system (``mksnap``), with a new id unless given."""
        path = self._require(pool, name)
        validate_name(snap, "snapshot name")
        if snap in self._snapshot_names(path):
            raise AlreadyExists(f"snapshot {snap!r} of filesystem {name!r} already exists")
        self.fs.mksnap(_b(path), _b(snap), 0o755,
                       metadata={SNAP_ID: snap_id or str(uuid.uuid4())})
        return self._snapshot_info(pool, name, snap, self._snap_meta(path, snap)[1])

    def delete_snapshot(self, pool: str, name: str, snap: str) -> None:
        """Delete a snapshot (clones are copies: none depends on it)."""
        path = self._require_snapshot(pool, name, snap)
        self.fs.rmsnap(_b(path), _b(snap))

    def list_snapshots(self, pool: str, name: str) -> list:
        """The file system's snapshots, oldest first (by creation time)."""
        path = self._require(pool, name)
        found = []
        for snap in self._snapshot_names(path):
            found.append(self._snapshot_info(pool, name, snap, self._snap_meta(path, snap)[1]))
        return sorted(found, key=lambda s: (s.created, s.name))

    def _snap_local(self, pool: str, name: str, snap: str) -> Path:
        return self._local(pool, name) / SNAPSHOTS_DIR / snap

    def _staging(self, pool: str) -> Path:
        path = Path(self.mount_dir(pool)) / STAGING
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def clone_snapshot(self, pool: str, name: str, snap: str,
                       new_name: str) -> FileSystemInfo:
        """A new file system holding a copy of the snapshot (made aside, then renamed in)."""
        self._require_snapshot(pool, name, snap)
        new_path = self._fs_path(pool, new_name)
        if self._exists(new_path):
            raise AlreadyExists(f"filesystem {new_name!r} already exists in pool {pool!r}")
        staging = self._staging(pool) / f"clone-{new_name}-{secrets.token_hex(4)}"
        try:
            self._copy_tree(self._snap_local(pool, name, snap), staging)
            os.rename(staging, self._local(pool, new_name))
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return self.filesystem_info(pool, new_name)

    def _copy_tree(self, src: Path, dst: Path) -> None:
        """Copy a tree with owners, modes and times (``cp -a``)."""
        self.runner.run(["cp", "-a", "--", str(src), str(dst)])

    def rollback(self, pool: str, name: str, snap: str) -> FileSystemInfo:
        """Make the live content equal to snapshot ``snap`` in place: its entries are
        copied into a hidden ``.rollback-*`` directory of the file system (same quota
        realm), the old entries removed and the copies renamed in. A run cut short leaves
        that directory, which the next run removes first."""
        self._require_snapshot(pool, name, snap)
        live = self._local(pool, name)
        source = self._snap_local(pool, name, snap)
        for leftover in live.glob(".rollback-*"):
            shutil.rmtree(leftover)
        staging = live / f".rollback-{secrets.token_hex(6)}"
        staging.mkdir()
        try:
            for entry in source.iterdir():
                self.runner.run(["cp", "-a", "--", str(entry), str(staging)])
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        for entry in live.iterdir():
            if entry.name != staging.name:
                _remove(entry)
        for entry in staging.iterdir():
            os.rename(entry, live / entry.name)
        staging.rmdir()
        st = source.stat()
        os.chown(live, st.st_uid, st.st_gid)
        os.chmod(live, st.st_mode & 0o7777)
        os.utime(live, ns=(st.st_atime_ns, st.st_mtime_ns))
        return self.filesystem_info(pool, name)

    def changed_since(self, pool: str, name: str, snap: str) -> list:
        """Paths created, written, removed or re-permissioned since snapshot ``snap``."""
        self._require_snapshot(pool, name, snap)
        old = treediff.tree_index(self._snap_local(pool, name, snap), SNAPSHOTS_DIR)
        new = treediff.tree_index(self._local(pool, name), SNAPSHOTS_DIR)
        return treediff.changed_paths(old, new)

    # -- send / receive ------------------------------------------------------------------
    def send_snapshot(self, pool: str, name: str, snap: str, parent: Optional[str] = None,
                      parent_source: Optional[str] = None) -> Iterator[bytes]:
        """The tree stream of the snapshot, incremental against ``parent`` (a snapshot of
        ``name`` or of ``parent_source``). Arguments are checked now."""
        path = self._require_snapshot(pool, name, snap)
        snap_id = self._snap_meta(path, snap)[0]
        parent_dir = parent_id = None
        if parent is not None:
            base_of = parent_source or name
            if parent == snap and base_of == name:
                raise InvalidArgument("the parent of an incremental send must be an older "
                                      "snapshot, not the snapshot itself")
            base_path = self._require_snapshot(pool, base_of, parent)
            parent_id = self._snap_meta(base_path, parent)[0]
            parent_dir = self._snap_local(pool, base_of, parent)
        return treediff.send_stream(self._snap_local(pool, name, snap), snap_id,
                                     SNAPSHOTS_DIR, parent_dir, parent_id)

    def _find_snapshot_by_id(self, path: str, snap_id: str) -> Optional[str]:
        for snap in self._snapshot_names(path):
            if self._snap_meta(path, snap)[0] == snap_id:
                return snap
        return None

    def receive_snapshot(self, pool: str, target: str, stream: Iterable[bytes],
                         snap: str) -> SnapshotInfo:
        """Apply a stream as snapshot ``snap`` of ``target`` (made when missing, from a
        full stream). The stream is spooled and checked whole first: a truncated or
        corrupt one changes nothing. The snapshot keeps the sender's id."""
        validate_name(snap, "snapshot name")
        path = self._fs_path(pool, target)
        with tempfile.TemporaryFile(dir=self._staging(pool)) as spool:
            header = treediff.spool_stream(stream, spool)
            exists = self._exists(path)
            if exists and snap in self._snapshot_names(path):
                raise AlreadyExists(f"snapshot {snap!r} of filesystem {target!r} already "
                                    "exists")
            base = None
            if header["parent"]:
                base = self._find_snapshot_by_id(path, header["parent"]) if exists else None
                if base is None:
                    raise NotFound("the parent snapshot of this incremental stream is not in "
                                   f"filesystem {target!r} of pool {pool!r}: receive the full "
                                   "stream first")

            def fill(live: Path) -> None:
                if base is not None:
                    for entry in self._snap_local(pool, target, base).iterdir():
                        self.runner.run(["cp", "-a", "--", str(entry), str(live)])
                treediff.apply_stream(spool, header, live)

            if not exists:
                staging = self._staging(pool) / f"recv-{target}-{secrets.token_hex(4)}"
                staging.mkdir()
                try:
                    fill(staging)
                    os.rename(staging, self._local(pool, target))
                except BaseException:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
                try:
                    return self.create_snapshot(pool, target, snap, header["snapshot"])
                except BaseException:
                    self.delete_filesystem(pool, target)
                    raise
            return self._snapshot_with_content(pool, target, snap, header["snapshot"], fill)

    def copy_snapshot(self, pool: str, source: str, snap: str, target: str,
                      new_snap: str) -> SnapshotInfo:
        """Snapshot ``new_snap`` of ``target`` with the content and the id of ``source``'s
        snapshot ``snap``: streams based on the original apply on top of it."""
        path = self._require_snapshot(pool, source, snap)
        validate_name(new_snap, "snapshot name")
        tpath = self._require(pool, target)
        if new_snap in self._snapshot_names(tpath):
            raise AlreadyExists(f"snapshot {new_snap!r} of filesystem {target!r} already "
                                "exists")
        snap_id = self._snap_meta(path, snap)[0]
        original = self._snap_local(pool, source, snap)

        def fill(live: Path) -> None:
            for entry in original.iterdir():
                self.runner.run(["cp", "-a", "--", str(entry), str(live)])

        return self._snapshot_with_content(pool, target, new_snap, snap_id, fill)

    def _snapshot_with_content(self, pool, target, snap, snap_id, fill) -> SnapshotInfo:
        """A CephFS snapshot is of a live directory: set the target's live entries aside
        (its quota lifted meanwhile: CephFS refuses renames across quota realms), fill it
        with ``fill(live)``, snapshot it, then put the live entries back."""
        path = self._require(pool, target)
        live = self._local(pool, target)
        quota = self._xattr_int(path, "ceph.quota.max_bytes") or None
        held = self._staging(pool) / f"held-{target}-{secrets.token_hex(4)}"
        held.mkdir()
        self._set_quota(path, None)
        try:
            for entry in list(live.iterdir()):
                os.rename(entry, held / entry.name)
            try:
                fill(live)
                return self.create_snapshot(pool, target, snap, snap_id)
            finally:
                for entry in list(live.iterdir()):
                    _remove(entry)
                for entry in list(held.iterdir()):
                    os.rename(entry, live / entry.name)
        finally:
            held.rmdir()
            self._set_quota(path, quota)

    # -- multi-active metadata -----------------------------------------------------------
    def pin(self, pool: str, relpath: str, rank: int) -> None:
        """Pin a directory of the pool (relative to its root, e.g. ``fs/ckpt/job-a``) to MDS
        ``rank`` (-1 unpins: the balancer decides again)."""
        path = f"{self.pool_root(pool)}/{relpath.strip('/')}"
        if not self._exists(path):
            raise NotFound(f"no directory {relpath!r} in pool {pool!r}")
        self.fs.setxattr(_b(path), "ceph.dir.pin", str(int(rank)).encode(), 0)

    def active_ranks(self) -> list:
        """The MDS ranks that are active now."""
        dump = self.mon_command("fs dump")
        ranks = []
        for fs in dump.get("filesystems", []):
            for info in fs["mdsmap"].get("info", {}).values():
                if info.get("state") == "up:active":
                    ranks.append(info["rank"])
        return sorted(ranks)

    def subtree_ranks(self, pool: str) -> dict:
        """``{path relative to the pool root: rank}`` of the subtrees each active MDS is
        authoritative for (``get subtrees``), for the pool's directories."""
        root = self.pool_root(pool)
        found = {}
        for rank in self.active_ranks():
            rc, out, err = self.fs.mds_command(str(rank), json.dumps(
                {"prefix": "get subtrees", "format": "json"}), b"")
            if rc != 0:
                raise CommandFailed(["ceph", "tell", f"mds.{rank}", "get subtrees"], rc, err)
            for sub in json.loads(out):
                where = sub["dir"]["path"]
                if sub.get("is_auth") and where.startswith(root + "/"):
                    found[where[len(root) + 1:]] = sub["auth_first"]
        return found


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def mds_rank_for(index: int, ranks: list) -> int:
    """Round-robin: the rank the ``index``-th pinned directory goes to."""
    if not ranks:
        raise Unsupported("the CephFS has no active MDS rank to pin to")
    return ranks[index % len(ranks)]
