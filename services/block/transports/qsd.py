"""NBD and vhost-user-blk exports through qemu-storage-daemon, driven over QMP.

One daemon serves every export of the machine. Each export is a small node graph::

    file (the volume file)  <-  raw  <-  throttle (group qos-<id>)  <-  export <id>

The throttle node is always there (with no limits until QoS is set) so limits can be
set, changed and removed live with ``qom-set`` on the throttle group, without touching
the export. ``resize`` runs ``block_resize`` on the raw node after the dataplane grew the
file. The daemon keeps no state across restarts: ``start()`` re-applies the exports
recorded in ``<state_dir>/qsd-exports.json``.

``repoint`` serves an export from another file (the volume moved to another pool): new
file and raw nodes are opened over the new file and the throttle node's child is swapped
with ``blockdev-reopen`` (QEMU drains the node's in-flight requests for the swap). The
export, its id, NBD name and vhost-user socket stay; connected clients keep their
connection and see no error, only requests held for the swap. The file and raw node names
carry a generation (``f-<id>-g<n>``) because both pairs exist during the swap.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from plumbing.atomic import write_json_atomic
from plumbing.process import Child, wait_for_port

from .base import (
    DaemonError,
    ExportExists,
    ExportNotFound,
    HostGroup,
    InvalidExport,
    QosLimits,
    Transport,
    check_export_id,
    check_volume_file,
    is_rbd,
    parse_rbd_path,
    require_installed,
    start_child,
    volume_size,
)
from .qmp import QMPClient, QMPError

PROTOCOLS = ("nbd", "vhost-user-blk")
_LIMIT_KEYS = {"iops_read": "iops-read", "iops_write": "iops-write",
               "iops_total": "iops-total", "bps_read": "bps-read",
               "bps_write": "bps-write", "bps_total": "bps-total"}


def qos_to_limits(qos: QosLimits | None) -> dict:
    """QEMU ThrottleLimits for ``qos``: every key present, 0 = unlimited (so a change clears old ones)."""
    values = asdict(qos) if qos else {}
    return {qkey: int(values.get(key) or 0) for key, qkey in _LIMIT_KEYS.items()}


class QemuStorageDaemon(Transport):
    """Supervise one qemu-storage-daemon and manage its NBD and vhost-user-blk exports.

    ``direct_io`` opens volume files with O_DIRECT and Linux native AIO (the fast path on
    a real disk); turn it off for file systems without O_DIRECT (tmpfs).
    """

    protocols = PROTOCOLS

    def __init__(self, state_dir: str | Path, *, nbd_host: str = "127.0.0.1",
                 nbd_port: int = 10809, direct_io: bool = True,
                 binary: str = "qemu-storage-daemon", adopt_only: bool = False):
        self.state_dir = Path(state_dir)
        self.adopt_only = adopt_only             # never start the daemon: its supervisor does
        self.nbd_host = nbd_host
        self.nbd_port = nbd_port
        self.direct_io = direct_io
        self.binary = binary
        self.qmp_path = self.state_dir / "qsd-qmp.sock"
        self.record_path = self.state_dir / "qsd-exports.json"
        self.socket_dir = self.state_dir / "vhost"
        self._proc: Child | None = None
        self._adopted = False
        self._qmp: QMPClient | None = None
        self._exports: dict[str, dict] = self._load_record()

    # ---------------------------------------------------------------- daemon lifecycle
    def start(self) -> None:
        """Start the daemon with an NBD server and a QMP socket, then re-apply recorded exports."""
        if self._proc is not None and self._proc.running():
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if self.qmp_path.exists():
            qmp = QMPClient(str(self.qmp_path))
            try:
                # our daemon from before a restart of the plane: keep it, add what is missing
                qmp.connect(retry_for=0)
            except DaemonError:
                self.qmp_path.unlink()
            else:
                self._qmp, self._adopted = qmp, True
                live = {e["id"] for e in self.qmp("query-block-exports")}
                for export_id, rec in list(self._exports.items()):
                    if export_id not in live:
                        self._attach(export_id, rec)
                return
        require_installed(self.binary)
        if self.adopt_only:
            raise DaemonError("qemu-storage-daemon is not running (it is being started "
                              "again); try again in a moment")
        argv = [self.binary,
                "--chardev", f"socket,path={self.qmp_path},server=on,wait=off,id=qmp0",
                "--monitor", "chardev=qmp0",
                "--nbd-server",
                f"addr.type=inet,addr.host={self.nbd_host},addr.port={self.nbd_port}"]
        self._proc = start_child("qemu-storage-daemon", argv, self.state_dir / "qsd.log")
        self._qmp = QMPClient(str(self.qmp_path))
        try:
            self._qmp.connect(retry_for=10.0)
        except DaemonError as exc:
            tail = self._proc.tail()
            self._proc.stop(timeout=5.0)
            raise DaemonError(f"qemu-storage-daemon did not start: {exc}; log: {tail}") from exc
        if not wait_for_port(self.nbd_host, self.nbd_port, 5.0, self._proc):
            self.stop()
            raise DaemonError(f"qemu-storage-daemon is not listening on "
                              f"{self.nbd_host}:{self.nbd_port} (port in use?)")
        for export_id, rec in list(self._exports.items()):
            self._attach(export_id, rec)

    def stop(self) -> None:
        """Ask the daemon to quit over QMP; SIGTERM/SIGKILL its PID if it does not."""
        if self._proc is None and not self._adopted:
            return
        if self._qmp is not None:
            try:
                self._qmp.execute("quit")
            except (DaemonError, QMPError):
                pass
            self._qmp.close()
            self._qmp = None
        if self._proc is not None and not self._proc.wait_exit(5.0):
            self._proc.stop(timeout=5.0)
        elif self._proc is None:                   # adopted: not our child, watch the port
            deadline = time.monotonic() + 5
            while wait_for_port(self.nbd_host, self.nbd_port, 0.05) and \
                    time.monotonic() < deadline:
                time.sleep(0.05)
        self._proc = None
        self._adopted = False

    def detach(self) -> None:
        """Close the QMP connection; the daemon keeps serving (start() adopts it again)."""
        if self._qmp is not None:
            self._qmp.close()
            self._qmp = None
        self._proc = None
        self._adopted = False

    def health(self) -> dict:
        """Running state, PID and the exports the daemon really has."""
        running = (self._proc is not None and self._proc.running()) or self._adopted
        detail = "running" if running else "not running"
        live = []
        if running:
            try:
                live = [e["id"] for e in self.qmp("query-block-exports")]
            except (DaemonError, QMPError) as exc:
                running, detail = False, f"QMP not answering: {exc}"
        missing = sorted(set(self._exports) - set(live))
        if running and missing:
            detail = f"exports missing from the daemon: {', '.join(missing)}"
        return {"running": running, "pid": self._proc.pid if self._proc else None,
                "exports": len(live), "detail": detail,
                "nbd": f"{self.nbd_host}:{self.nbd_port}"}

    def qmp(self, command: str, arguments: dict | None = None):
        """Run a raw QMP command on the daemon (for diagnostics and tests)."""
        if self._qmp is None:
            raise DaemonError("qemu-storage-daemon is not running; call start() first")
        return self._qmp.execute(command, arguments)

    # ---------------------------------------------------------------- exports
    def export(self, export_id: str, volume_path: str, *, protocol: str | None = "nbd",
               read_only: bool = False, host_group: HostGroup | None = None,
               qos: QosLimits | None = None) -> dict:
        """Export a raw volume file over NBD (name = export id) or vhost-user-blk (a unix socket).

        ``host_group`` is accepted for interface symmetry; NBD here has no per-host ACL
        (bind the NBD server to a trusted address).
        """
        check_export_id(export_id)
        protocol = protocol or "nbd"
        if protocol not in PROTOCOLS:
            raise InvalidExport(f"qemu-storage-daemon serves {', '.join(PROTOCOLS)}, not {protocol}")
        path = str(check_volume_file(volume_path))
        rec = {"protocol": protocol, "path": path, "read_only": bool(read_only),
               "qos": asdict(qos) if qos else None}
        if export_id in self._exports:
            old = self._exports[export_id]
            if {k: old[k] for k in ("protocol", "path", "read_only")} != \
                    {k: rec[k] for k in ("protocol", "path", "read_only")}:
                raise ExportExists(f"export {export_id} already exists for {old['path']} "
                                   f"({old['protocol']}); unexport it first")
            if rec["qos"] != old.get("qos"):
                self.set_qos(export_id, qos)
            return self.connection_info(export_id)
        self._attach(export_id, rec)
        self._exports[export_id] = rec
        self._save_record()
        return self.connection_info(export_id)

    def _add_file_nodes(self, f: str, r: str, path: str, ro: bool, steps: list) -> None:
        """Open ``path`` as file node ``f`` under raw node ``r``; ``steps`` gets their undo.
        An RBD image (``rbd:`` path) is opened by qemu's rbd driver (librbd) instead."""
        if is_rbd(path):
            spec = parse_rbd_path(path)
            file_opts = {"driver": "rbd", "node-name": f, "pool": spec["pool"],
                         "image": spec["image"], "conf": spec["conf"], "user": spec["id"],
                         "read-only": ro}
            if spec["snap"]:
                file_opts["snapshot"] = spec["snap"]
        else:
            file_opts = {"driver": "file", "node-name": f, "filename": path, "read-only": ro}
        if self.direct_io and not is_rbd(path):
            file_opts.update({"aio": "native", "cache": {"direct": True}})
        self.qmp("blockdev-add", file_opts)
        steps.append(("blockdev-del", {"node-name": f}))
        self.qmp("blockdev-add", {"driver": "raw", "node-name": r, "file": f, "read-only": ro})
        steps.append(("blockdev-del", {"node-name": r}))

    def _undo(self, steps: list) -> None:
        for cmd, a in reversed(steps):
            try:
                self.qmp(cmd, a)
            except (QMPError, DaemonError):
                pass

    def _attach(self, export_id: str, rec: dict) -> None:
        ro = rec["read_only"]
        f, r, t, tg = self._names(export_id, rec.get("gen", 0))
        steps = []
        try:
            self._add_file_nodes(f, r, rec["path"], ro, steps)
            qos = QosLimits(**rec["qos"]) if rec.get("qos") else None
            self.qmp("object-add", {"qom-type": "throttle-group", "id": tg,
                                    "limits": qos_to_limits(qos)})
            steps.append(("object-del", {"id": tg}))
            self.qmp("blockdev-add", {"driver": "throttle", "node-name": t,
                                      "throttle-group": tg, "file": r, "read-only": ro})
            steps.append(("blockdev-del", {"node-name": t}))
            self._add_export(export_id, rec)
        except (QMPError, DaemonError) as exc:
            self._undo(steps)
            raise DaemonError(f"cannot export {rec['path']} as {export_id}: {exc}") from exc

    def repoint(self, export_id: str, volume_path: str) -> dict:
        """Serve the export from ``volume_path`` (the volume's new copy) under the same id,
        NBD name and socket, swapping the file under its throttle node live (module doc).

        Idempotent (already there: nothing to do). On failure the export keeps serving the
        old file and DaemonError says why.
        """
        rec = self._get(export_id)
        path = str(check_volume_file(volume_path))
        if rec["path"] == path:
            return self.connection_info(export_id)
        live = {e["id"] for e in self.qmp("query-block-exports")}
        if export_id not in live:              # not in the daemon: the record is all there is
            rec["path"] = path
            self._save_record()
            self._attach(export_id, rec)
            return self.connection_info(export_id)
        ro, gen = rec["read_only"], rec.get("gen", 0)
        old_f, old_r, t, tg = self._names(export_id, gen)
        new_f, new_r, _, _ = self._names(export_id, gen + 1)
        steps = []
        try:
            self._add_file_nodes(new_f, new_r, path, ro, steps)
            self.qmp("blockdev-reopen", {"options": [
                {"driver": "throttle", "node-name": t, "throttle-group": tg, "file": new_r,
                 "read-only": ro}]})
        except (QMPError, DaemonError) as exc:
            self._undo(steps)
            raise DaemonError(f"export {export_id} cannot be served from {path}: {exc}; it "
                              f"still serves {rec['path']}") from exc
        rec["path"], rec["gen"] = path, gen + 1
        self._save_record()
        for node in (old_r, old_f):            # the old file is closed: the move may delete it
            try:
                self.qmp("blockdev-del", {"node-name": node})
            except QMPError as exc:
                raise DaemonError(f"export {export_id} now serves {path} but the old file "
                                  f"node {node} could not be closed: {exc}") from exc
        return self.connection_info(export_id)

    def _add_export(self, export_id: str, rec: dict) -> None:
        args = {"type": rec["protocol"], "id": export_id, "node-name": self._names(export_id)[2],
                "writable": not rec["read_only"]}
        if rec["protocol"] == "nbd":
            args["name"] = export_id
        else:
            sock = self.socket_dir / f"{export_id}.sock"
            if sock.exists():
                sock.unlink()
            args["addr"] = {"type": "unix", "path": str(sock)}
        self.qmp("block-export-add", args)

    def _del_export(self, export_id: str) -> None:
        live = {e["id"] for e in self.qmp("query-block-exports")}
        if export_id in live:
            self._qmp.events.clear()
            self.qmp("block-export-del", {"id": export_id, "mode": "hard"})
            self._qmp.wait_event("BLOCK_EXPORT_DELETED", lambda d: d.get("id") == export_id)

    def unexport(self, export_id: str) -> None:
        """Delete the export and its nodes; clients connected to it are disconnected."""
        if export_id not in self._exports:
            raise ExportNotFound(f"no NBD/vhost-user-blk export {export_id}")
        self._detach(export_id)
        del self._exports[export_id]
        self._save_record()
        sock = self.socket_dir / f"{export_id}.sock"
        if sock.exists():
            sock.unlink()

    def _detach(self, export_id: str) -> None:
        f, r, t, tg = self._names(export_id, self._exports[export_id].get("gen", 0))
        self._del_export(export_id)
        for cmd, args in (("blockdev-del", {"node-name": t}), ("object-del", {"id": tg}),
                          ("blockdev-del", {"node-name": r}), ("blockdev-del", {"node-name": f})):
            try:
                self.qmp(cmd, args)
            except QMPError as exc:
                if "not found" not in exc.desc.lower() and exc.qmp_class != "DeviceNotFound":
                    raise

    def set_qos(self, export_id: str, qos: QosLimits | None) -> None:
        """Change (or clear, with None) the export's limits live."""
        rec = self._get(export_id)
        tg = self._names(export_id)[3]
        self.qmp("qom-set", {"path": tg, "property": "limits", "value": qos_to_limits(qos)})
        rec["qos"] = asdict(qos) if qos else None
        self._save_record()

    def resize(self, export_id: str) -> int:
        """Grow the export's nodes to the file's current size; return the size in bytes.

        vhost-user-blk tells the guest at once (config-change notification). The NBD
        protocol has no resize notice and QEMU's NBD server forbids resizing an exported
        node, so for NBD the export is dropped and re-added under the same name and port
        around the resize: the connection info does not change, connected clients are
        disconnected and see the new size when they reconnect. A read-only export is
        re-opened the same way (a read-only node cannot be resized).
        """
        rec = self._get(export_id)
        size = volume_size(rec["path"])
        node = self._names(export_id)[2]
        if rec["read_only"]:
            # a read-only node cannot be resized: open the file again at its new size
            self._detach(export_id)
            self._attach(export_id, rec)
        elif rec["protocol"] == "nbd":
            self._del_export(export_id)
            try:
                self.qmp("block_resize", {"node-name": node, "size": size})
            finally:
                self._add_export(export_id, rec)
        else:
            self.qmp("block_resize", {"node-name": node, "size": size})
        return size

    def connection_info(self, export_id: str) -> dict:
        """{"protocol": "nbd", "name", "host", "port", "uri"} or {"protocol": "vhost-user-blk", "socket"}."""
        rec = self._get(export_id)
        info = {"protocol": rec["protocol"], "export_id": export_id,
                "read_only": rec["read_only"]}
        if rec["protocol"] == "nbd":
            info.update({"name": export_id, "host": self.nbd_host, "port": self.nbd_port,
                         "uri": f"nbd://{self.nbd_host}:{self.nbd_port}/{export_id}"})
        else:
            info["socket"] = str(self.socket_dir / f"{export_id}.sock")
        return info

    def list_exports(self) -> list[str]:
        return sorted(self._exports)

    def volume_of(self, export_id: str) -> str:
        return self._get(export_id)["path"]

    # ---------------------------------------------------------------- helpers
    def _get(self, export_id: str) -> dict:
        try:
            return self._exports[export_id]
        except KeyError:
            raise ExportNotFound(f"no NBD/vhost-user-blk export {export_id}") from None

    @staticmethod
    def _names(export_id: str, gen: int = 0) -> tuple[str, str, str, str]:
        """Node names (file, raw, throttle) and throttle group; ``gen`` counts repoints."""
        # node names must start with a letter and avoid '.'; export ids may contain '.'
        base = export_id.replace(".", "_")
        g = f"-g{gen}" if gen else ""
        return f"f-{base}{g}", f"r-{base}{g}", f"t-{base}", f"qos-{base}"

    def _load_record(self) -> dict:
        try:
            return json.loads(self.record_path.read_text())
        except FileNotFoundError:
            return {}

    def _save_record(self) -> None:
        write_json_atomic(self.record_path, self._exports, indent=1, sort_keys=True)
