"""The file service's two daemons as the management plane sees them (no Django here).

`strata up` starts `ganesha.nfsd` and `smbd` as its own children (see `up.py`); the plane's
Django processes (web and worker are separate processes) never own them. They drive the
running daemons through the runtime's supervisors with two changes made here:

- "is it running" and "signal it" go through the daemon's pid file, not a child handle;
- every apply is serialized across processes by a file lock in the daemon's state directory.

State lives under ``<data_dir>/run/nfs`` and ``<data_dir>/run/smb``. Next to each config the
plane keeps the plain list of what it last applied successfully (``served.json``), so that
`strata up` starts the daemons with the config the plane last rendered, re-rendered with the
current ports. ``<data_dir>/run/nfs/binds.json`` lists the file-system directories the plane
bind-mounted onto themselves for Ganesha (btrfs subvolumes); they are unmounted when
Ganesha stops.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from pathlib import Path

from plumbing import nodeceph
from plumbing.atomic import write_if_changed
from plumbing.process import data_address, port_open, probe_address
from services.file.runtime import (
    CommandError,
    DaemonStartError,
    NfsCluster,
    NfsExport,
    NfsServer,
    NfsSettings,
    SmbServer,
    SmbSettings,
    SmbShare,
    build_ganesha_config,
    build_smb_config,
    nfs_null_ping,
    render_ganesha_conf,
    render_smb_conf,
)
from services.file.runtime.btrfs_mounts import bind_mount_self, is_mount_point, unmount
from services.file.runtime.grace import GraceDb
from services.file.runtime.nfs_server import ganesha_argv
from services.file.runtime.process import require_binary
from services.file.runtime.samba import STATE_SUBDIRS

DEFAULT_NFS_PORT = 2049
DEFAULT_SMB_PORT = 445
SERVED = "served.json"


def file_bind(options: dict) -> str:
    """The address NFS and SMB listen on: ``--file-bind``, else ``--data-host``, else
    `strata up`'s ``--host`` (127.0.0.1 by default: nothing listens beyond what the operator
    chose)."""
    return data_address(options, "file_bind")


def nfs_settings(data_dir, options: dict) -> NfsSettings:
    """Ganesha's settings for a data directory and the options of `strata up` (or of a
    cluster node: ``nfs_cluster``, ``nfs_grace_seconds``, ``nfs_lease_seconds``)."""
    extra = {k: int(options[f"nfs_{k}"]) for k in ("grace_seconds", "lease_seconds")
             if options.get(f"nfs_{k}")}
    return NfsSettings(state_dir=str(Path(data_dir) / "run" / "nfs"),
                       port=int(options.get("nfs_port") or DEFAULT_NFS_PORT),
                       bind_address=file_bind(options),
                       cluster=nfs_cluster(data_dir, options.get("nfs_cluster")), **extra)


def nfs_cluster(data_dir, grace: dict | None) -> NfsCluster | None:
    """A cluster node's membership of the NFS grace database, from the plane's heartbeat
    answer (``{"pool", "rados_pool", "namespace", "nodeid", "serial"}``), reached with the
    node's own Ceph client files of that pool (:mod:`plumbing.nodeceph`); None when serving
    alone."""
    if not grace:
        return None
    files = nodeceph.read_pool(data_dir, grace["pool"]) or {}
    pool_dir = nodeceph.pool_dir(data_dir, grace["pool"])
    client = files.get("client") or f"strata-node.{grace['nodeid']}.{grace['pool']}"
    return NfsCluster(conf=str(pool_dir / "ceph.conf"), client=client,
                      pool=grace["rados_pool"], namespace=grace["namespace"],
                      nodeid=grace["nodeid"], serial=grace.get("serial"))


def smb_interfaces(bind: str) -> list[str]:
    """smbd binds only to the listed interfaces: every interface of the host for a wildcard."""
    if bind and bind not in ("0.0.0.0", "*"):
        return [bind]
    names = [name for _, name in socket.if_nameindex()]
    return ["lo"] + [n for n in names if n != "lo"]


def smb_settings(data_dir, options: dict) -> SmbSettings:
    """smbd's settings for a data directory and the options of `strata up`."""
    return SmbSettings(state_dir=str(Path(data_dir) / "run" / "smb"),
                       port=int(options.get("smb_port") or DEFAULT_SMB_PORT),
                       interfaces=smb_interfaces(file_bind(options)))


def _pid_alive(pid_file: str, comm: str) -> int | None:
    """The pid in ``pid_file`` if that process is alive and is ``comm``; else None."""
    try:
        with open(pid_file) as f:
            pid = int(f.read().split()[0])
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
    except (OSError, ValueError, IndexError):
        return None
    return pid if name.startswith(comm[:15]) else None


class _PlaneLock:
    """Serialize applies across the plane's processes (and threads) with flock."""

    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, "plane.lock")

    @contextlib.contextmanager
    def held(self):
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def _served_path(state_dir: str) -> str:
    return os.path.join(state_dir, SERVED)


def load_served(state_dir: str) -> list[dict]:
    """What the plane last applied successfully to this daemon (plain dicts)."""
    try:
        with open(_served_path(state_dir)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return []


def save_served(state_dir: str, items: list[dict]) -> None:
    """Record what is now applied (see :func:`load_served`)."""
    write_if_changed(_served_path(state_dir), json.dumps(items, indent=1, sort_keys=True))


class PlaneNfsServer(NfsServer):
    """An NfsServer for a ganesha.nfsd started by `strata up`, found through its pid file."""

    def __init__(self, settings: NfsSettings):
        super().__init__(settings)
        self.lock = _PlaneLock(settings.state_dir)
        self.binds_path = os.path.join(settings.state_dir, "binds.json")

    def daemon_pid(self) -> int | None:
        """The pid of the running ganesha.nfsd of this state directory, or None."""
        return _pid_alive(self.pid_path, "ganesha.nfsd")

    def is_running(self) -> bool:
        return self.daemon_pid() is not None

    def signal(self, signum: int) -> None:
        pid = self.daemon_pid()
        if pid is None:
            raise DaemonStartError(f"ganesha.nfsd is not running (no live pid in {self.pid_path})")
        os.kill(pid, signum)

    def prepare(self) -> None:
        """State directories, and a config from the last served exports (empty at first);
        on a cluster node, membership of the grace database before Ganesha starts."""
        os.makedirs(os.path.join(self.settings.state_dir, "recovery"), exist_ok=True)
        if self.settings.cluster is not None:
            GraceDb(self.settings.cluster).add(self.settings.cluster.nodeid)
        exports = []
        for item in load_served(self.settings.state_dir):
            if os.path.isdir(item["path"]):      # its pool may not be mounted yet
                exports.append(NfsExport.from_dict(item))
        write_if_changed(self.conf_path,
                         render_ganesha_conf(build_ganesha_config(self.settings, exports)))

    def argv(self) -> list[str]:
        """The command line `strata up` runs (the same as ``NfsServer.start``)."""
        return ganesha_argv(require_binary("ganesha.nfsd"), self.conf_path, self.log_path,
                            self.pid_path, self.settings.cluster)

    def ready(self) -> bool:
        """True when Ganesha answers an RPC NULL call on its port."""
        return nfs_null(self.settings)

    def force_reload(self, timeout: float = 15.0) -> None:
        """Re-read the installed config even if unchanged (exports whose path appeared since)."""
        with self._lock:
            if self.is_running():
                self._reload(timeout)

    # -- bind mounts of btrfs subvolumes (Ganesha cannot export one that is not a mount) --

    def binds(self) -> list[str]:
        try:
            with open(self.binds_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return []

    def _save_binds(self, paths) -> None:
        write_if_changed(self.binds_path, json.dumps(sorted(set(paths))))

    def bind(self, path: str, read_only: bool = False) -> None:
        """Bind-mount ``path`` onto itself and remember it (call with the lock held)."""
        bind_mount_self(path, read_only=read_only)
        self._save_binds(self.binds() + [path])

    def unbind(self, path: str) -> None:
        """Unmount one bind the plane made (call with the lock held); CommandError if busy."""
        unmount(path)
        self._save_binds([p for p in self.binds() if p != path])

    def unbind_unused(self, needed: set[str]) -> list[str]:
        """Unmount the binds no export needs any more; returns the ones that stayed busy."""
        kept = []
        for path in sorted(self.binds(), reverse=True):     # snapshots before their fs
            if path in needed:
                kept.append(path)
                continue
            try:
                unmount(path)
            except CommandError:
                kept.append(path)
            except OSError:
                pass
        self._save_binds(kept)
        return [p for p in kept if p not in needed]

    def unbind_all(self) -> None:
        """Unmount every bind the plane made (when Ganesha has stopped)."""
        for path in sorted(self.binds(), reverse=True):
            with contextlib.suppress(CommandError, OSError):
                unmount(path)
        self._save_binds([p for p in self.binds() if os.path.exists(p) and is_mount_point(p)])


def nfs_null(settings: NfsSettings) -> bool:
    """True if the Ganesha of ``settings`` answers an RPC NULL call."""
    return nfs_null_ping(probe_address(settings.bind_address), settings.port)


class PlaneSmbServer(SmbServer):
    """An SmbServer for an smbd started by `strata up`, found through its pid file."""

    def __init__(self, settings: SmbSettings):
        super().__init__(settings)
        self.lock = _PlaneLock(settings.state_dir)

    def daemon_pid(self) -> int | None:
        """The pid of the running smbd of this state directory, or None."""
        piddir = os.path.join(self.settings.state_dir, "pid")
        try:
            names = sorted(n for n in os.listdir(piddir) if n.startswith("smbd")
                           and n.endswith(".pid"))
        except OSError:
            return None
        for name in names:
            pid = _pid_alive(os.path.join(piddir, name), "smbd")
            if pid:
                return pid
        return None

    def is_running(self) -> bool:
        return self.daemon_pid() is not None

    def prepare(self) -> None:
        """State directories, and smb.conf from the last served shares (empty at first)."""
        state = self.settings.state_dir
        os.makedirs(state, exist_ok=True)
        os.chmod(state, 0o755)       # smbd runs dfree scripts as the connected user
        for sub in STATE_SUBDIRS:
            os.makedirs(os.path.join(state, sub), mode=0o755, exist_ok=True)
        os.chmod(os.path.join(state, "private"), 0o700)
        shares = [SmbShare.from_dict(s) for s in load_served(state)]
        write_if_changed(self.conf_path, render_smb_conf(build_smb_config(self.settings, shares)))

    def argv(self) -> list[str]:
        """The command line `strata up` runs (the same as ``SmbServer.start``)."""
        return [require_binary("smbd"), "--foreground", "--no-process-group", "--debug-stdout",
                f"--configfile={self.conf_path}"]

    def ready(self) -> bool:
        """True when smbd accepts TCP connections on its port."""
        return port_open(self.probe_host(), self.settings.port)


def nfs_server(data_dir, options: dict) -> PlaneNfsServer:
    """The plane's handle on the ganesha.nfsd of ``data_dir``."""
    return PlaneNfsServer(nfs_settings(data_dir, options))


def smb_server(data_dir, options: dict) -> PlaneSmbServer:
    """The plane's handle on the smbd of ``data_dir``."""
    return PlaneSmbServer(smb_settings(data_dir, options))
