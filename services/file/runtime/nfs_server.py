"""Supervisor for NFS-Ganesha: start, apply exports (write, SIGHUP, check), health, stop."""

from __future__ import annotations

import os
import random
import signal
import socket
import struct
import threading
import time
from dataclasses import replace

from plumbing.atomic import write_if_changed
from plumbing.process import probe_address

from .errors import DaemonStartError, FilesystemMissing, InvalidShareSpec, ReloadError
from .ganesha import (build_ganesha_config, ceph_client_conf, ceph_client_conf_path,
                      render_ganesha_conf)
from .grace import GraceDb
from .process import ChildDaemon, require_binary
from .specs import SNAPSHOT_DIR, NfsCluster, NfsExport, NfsSettings

_RELOAD_DONE = "Reread exports complete"
_RELOAD_ERRORS = (":CRIT :", ":MAJ :", ":FATAL :")
# at start, krb5/D-Bus/rpcbind complaints are expected; config and FSAL ones are not
_START_ERRORS = (":CONFIG :CRIT :", ":CONFIG :MAJ :", ":FSAL :CRIT :", ":FSAL :MAJ :")


def nfs_null_ping(host: str, port: int, timeout: float = 2.0) -> bool:
    """Send an ONC RPC NULL call to NFS program 100003 v4 over TCP; True if it succeeds.

    This proves the daemon's RPC dispatcher answers, not just that the port is open.
    """
    xid = random.getrandbits(32)
    # xid, CALL, rpcvers 2, program, version 4, procedure NULL, AUTH_NONE cred and verifier
    body = struct.pack(">10I", xid, 0, 2, 100003, 4, 0, 0, 0, 0, 0)
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">I", 0x80000000 | len(body)) + body)
            reply = b""
            while len(reply) < 28:
                chunk = sock.recv(64)
                if not chunk:
                    return False
                reply += chunk
    except OSError:
        return False
    rxid, mtype, stat, _flavor, _vlen, accept = struct.unpack(">6I", reply[4:28])
    return rxid == xid and mtype == 1 and stat == 0 and accept == 0


def ganesha_argv(binary: str, conf_path: str, log_path: str, pid_path: str,
                 cluster: NfsCluster | None) -> list[str]:
    """Ganesha's command line; a server of a cluster gets an epoch of its own (``-E``).

    Ganesha makes its client IDs, session IDs and state IDs from its epoch (by default its
    start time in seconds) and counters that start at 1. Two servers of one cluster started
    in the same second therefore hand out the same IDs: a client whose address moved to the
    other server found its old session there, belonging to another client (its requests
    accepted on that session for 40 s). The epoch of a cluster's server is
    its start time in seconds with :attr:`NfsCluster.epoch_tag` as the low byte, so it differs
    from every other node's and from the node's own earlier starts, as Ganesha's own does.
    It is computed at each start, through ``sh`` (which execs Ganesha: same PID), since a
    supervisor starts the same command line again."""
    argv = [binary, "-F", "-f", conf_path, "-L", log_path, "-p", pid_path]
    if cluster is None:
        return argv
    epoch = f"$(( ($(date +%s) << 8 | {cluster.epoch_tag}) & 4294967295 ))"
    return ["/bin/sh", "-c", f'exec "$0" -E {epoch} "$@"', *argv]


class NfsServer(ChildDaemon):
    """One ``ganesha.nfsd`` we started, its config in ``settings.state_dir``.

    Usage: ``server = NfsServer(settings); server.start(exports); server.apply(new_exports);
    server.stop()``. ``apply`` raises (and keeps the previous config installed and serving)
    when the new exports are refused.
    """

    name = "ganesha.nfsd"

    def __init__(self, settings: NfsSettings) -> None:
        super().__init__()
        self.settings = settings
        state = settings.state_dir
        self.conf_path = os.path.join(state, "ganesha.conf")
        self.log_path = os.path.join(state, "ganesha.log")
        self.pid_path = os.path.join(state, "ganesha.pid")
        self.exports: list[NfsExport] = []
        self._lock = threading.Lock()

    def start(self, exports: list[NfsExport] = (), timeout: float = 15.0) -> None:
        """Write the config for ``exports``, start Ganesha in the foreground, wait for RPC."""
        binary = require_binary("ganesha.nfsd")
        os.makedirs(os.path.join(self.settings.state_dir, "recovery"), exist_ok=True)
        if self.settings.cluster is not None:   # a member of the grace database before it runs
            GraceDb(self.settings.cluster).add(self.settings.cluster.nodeid)
        exports = list(exports)
        text = self._render(exports)
        write_if_changed(self.conf_path, text)
        offset = _size(self.log_path)
        self._spawn(ganesha_argv(binary, self.conf_path, self.log_path, self.pid_path,
                                 self.settings.cluster), self.log_path + ".stdout")
        try:
            self._wait_until(self.healthy, timeout, "waiting for NFS RPC", self.log_path)
        except DaemonStartError:
            self.stop()
            raise
        refused = [line for line in _read_from(self.log_path, offset).splitlines()
                   if any(t in line for t in _START_ERRORS)]
        if refused:
            self.stop()
            raise DaemonStartError("ganesha.nfsd refused the exports at start:\n"
                                   + "\n".join(refused))
        self.exports = exports

    def healthy(self) -> bool:
        """True if our Ganesha is alive and answers an RPC NULL call."""
        return self.is_running() and nfs_null_ping(
            probe_address(self.settings.bind_address), self.settings.port)

    def apply(self, exports: list[NfsExport], timeout: float = 15.0) -> bool:
        """Make the running Ganesha serve exactly ``exports``; True if the config changed.

        Build -> render -> write if changed -> SIGHUP -> wait for Ganesha's "Reread exports
        complete" -> check the log for errors of this reload -> health-check. On any
        failure the previous config is written back and re-read, then the error is raised.
        """
        exports = list(exports)
        text = self._render(exports)
        with self._lock:
            old = _read(self.conf_path)
            if not write_if_changed(self.conf_path, text):
                self.exports = exports
                return False
            if not self.is_running():
                self.exports = exports
                return True
            try:
                self._reload(timeout)
            except ReloadError as failure:
                if old is not None:
                    write_if_changed(self.conf_path, old)
                    try:
                        self._reload(timeout)
                    except ReloadError as second:
                        raise ReloadError(f"{failure}\nRestoring the previous config also "
                                          f"failed: {second}") from failure
                raise
            self.exports = exports
            return True

    def refresh_snapshots(self, export_id: int, timeout: float = 15.0) -> None:
        """Make snapshots mounted since the export was created visible under ``.snapshots``.

        Ganesha claims the file systems under an export only when it creates the export, so
        the read-only snapshot export of ``export_id`` is removed and added again (two
        reloads). The writable export and its clients are not touched.
        """
        current = list(self.exports)
        if not any(e.export_id == export_id and e.snapshots for e in current):
            raise InvalidShareSpec(f"export {export_id} is not served with snapshots")
        without = [replace(e, snapshots=False) if e.export_id == export_id else e
                   for e in current]
        self.apply(without, timeout)
        self.apply(current, timeout)

    def _render(self, exports: list[NfsExport]) -> str:
        ceph = [e.ceph for e in exports if e.ceph is not None]
        if ceph:
            try:
                with open(ceph[0].conf, encoding="utf-8") as f:
                    cluster_conf = f.read()
            except OSError as exc:
                raise FilesystemMissing(f"cannot read the Ceph cluster's conf "
                                        f"{ceph[0].conf!r}: {exc}") from None
            os.makedirs(self.settings.state_dir, exist_ok=True)
            write_if_changed(ceph_client_conf_path(self.settings), ceph_client_conf(cluster_conf))
        for export in exports:
            if export.ceph is not None:
                continue  # Ganesha reaches it through libcephfs: no local path to check
            if not os.path.isdir(export.path):
                raise FilesystemMissing(
                    f"export {export.pseudo!r}: path {export.path!r} does not exist "
                    "(was its file system deleted?)")
            snapdir = os.path.join(export.path, SNAPSHOT_DIR)
            if export.snapshots and not os.path.isdir(snapdir):
                try:
                    os.mkdir(snapdir, 0o755)
                except OSError as exc:
                    raise FilesystemMissing(f"export {export.pseudo!r}: cannot create the "
                                            f"snapshot directory {snapdir!r}: {exc}") from None
        return render_ganesha_conf(build_ganesha_config(self.settings, exports))

    def _reload(self, timeout: float) -> None:
        offset = _size(self.log_path)
        self.signal(signal.SIGHUP)
        deadline = time.monotonic() + timeout
        new = ""
        while _RELOAD_DONE not in new:
            if time.monotonic() > deadline or not self.is_running():
                raise ReloadError(f"ganesha.nfsd did not finish re-reading {self.conf_path} "
                                  f"in {timeout:.0f}s; see {self.log_path}")
            time.sleep(0.05)
            new = _read_from(self.log_path, offset)
        # Ganesha logs this reload's config errors from its signal thread right after
        # "complete"; other threads (client traffic) keep logging, so filter on the thread.
        time.sleep(0.3)
        new = _read_from(self.log_path, offset)
        errors = [line for line in new.splitlines()
                  if "[sigmgr]" in line and any(t in line for t in _RELOAD_ERRORS)]
        if errors:
            raise ReloadError("ganesha.nfsd refused the new exports:\n" + "\n".join(errors))
        if not self.healthy():
            raise ReloadError(f"ganesha.nfsd does not answer after reload; see {self.log_path}")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _read_from(path: str, offset: int) -> str:
    if not os.path.exists(path):
        return ""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")
