"""BlockRuntime: the one object the management plane drives for block exports.

It owns one transport per protocol and routes every call by export id::

    rt = BlockRuntime("/var/lib/strata/block", iscsi_port=3260, nbd_port=10809)
    rt.start()
    rt.set_host_group(HostGroup("db", hosts=[Host("db1", iqn="iqn....:db1",
                                                  chap_user="db1", chap_secret="12-16 chars")]))
    info = rt.export("exp-1", "iscsi", volume.path, host_group=group)   # -> connection dict
    rt.volume_resized(volume.path)        # after driver.resize_volume(): LUNs/exports grow
    rt.check_volume_deletable(volume.path)   # ExportInUse while any export serves it
    rt.repoint("exp-1", new_path)         # the volume moved: same IQN/LUN, NBD name, socket
    rt.unexport("exp-1")
    rt.stop()

Export ids are unique across protocols (use the plane's export primary key, e.g.
``f"exp-{pk}"``). Every error is a TransportError (or, for nvmf, a DataplaneError) with a
``code`` and a message a user can act on. No Django here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from plumbing.errors import StrataError

from .base import (
    DaemonError,
    ExportExists,
    ExportInUse,
    ExportNotFound,
    HostGroup,
    InvalidExport,
    QosLimits,
    Transport,
    check_export_id,
)
from .iscsi import TgtdTarget
from .nvmf import NvmfTarget
from .qsd import QemuStorageDaemon

PROTOCOLS = ("iscsi", "nbd", "vhost-user-blk", "nvmf")


class BlockRuntime:
    """iSCSI (tgtd), NBD + vhost-user-blk (qemu-storage-daemon) and, with an spdk driver,
    NVMe-oF/TCP (spdk_tgt), each kept in ``<state_dir>/<daemon>/``."""

    def __init__(self, state_dir: str | Path, *, host: str = "127.0.0.1",
                 iscsi_port: int = 3260, nbd_port: int = 10809, nvmf_port: int = 4420,
                 spdk_driver=None, direct_io: bool = True,
                 iqn_base: str = "iqn.2026-01.io.strata", adopt_only: bool = False):
        # adopt_only: the daemons belong to a supervisor (`strata up`), which starts them
        # again if they die; a session never starts one of its own (it would take the port)
        self.state_dir = Path(state_dir)
        self.iscsi = TgtdTarget(self.state_dir / "tgtd", portal_host=host,
                                portal_port=iscsi_port, iqn_base=iqn_base,
                                adopt_only=adopt_only)
        self.qsd = QemuStorageDaemon(self.state_dir / "qsd", nbd_host=host, nbd_port=nbd_port,
                                     direct_io=direct_io, adopt_only=adopt_only)
        self.nvmf = (NvmfTarget(spdk_driver, self.state_dir / "nvmf", host=host, port=nvmf_port)
                     if spdk_driver is not None else None)
        self.transports: dict[str, Transport] = {"iscsi": self.iscsi, "nbd": self.qsd,
                                                 "vhost-user-blk": self.qsd}
        if self.nvmf is not None:
            self.transports["nvmf"] = self.nvmf
        # protocols whose daemon is missing or did not start: {protocol: why} (see start())
        self.unavailable: dict[str, StrataError] = {}

    def _unique(self) -> list[Transport]:
        seen, out = set(), []
        for t in self.transports.values():
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    def start(self) -> None:
        """Start every daemon and re-apply the recorded exports.

        A daemon that is not installed or does not start disables only its own protocols:
        they leave ``transports`` for ``unavailable`` and a call for them raises a DaemonError
        saying why (503); this raises only when no daemon runs at all.
        """
        for t in self._unique():
            try:
                t.start()
            except StrataError as exc:
                for protocol in [p for p, tr in self.transports.items() if tr is t]:
                    self.unavailable[protocol] = exc
                    del self.transports[protocol]
        if not self.transports:
            raise next(iter(self.unavailable.values()))

    def stop(self) -> None:
        """Stop the daemons this runtime started (exports stay recorded)."""
        for t in reversed(self._unique()):
            t.stop()

    def detach(self) -> None:
        """Let go of the daemons without stopping them (the next start() adopts them)."""
        for t in self._unique():
            t.detach()

    @classmethod
    @contextlib.contextmanager
    def session(cls, state_dir: str | Path, **kwargs):
        """A runtime for one piece of work from any process (API worker, Celery task).

        Holds ``<state_dir>/block.lock`` so processes take turns (qemu-storage-daemon
        accepts one QMP client at a time), adopts the running daemons (starting them if
        they are not running), and detaches at the end without stopping them::

            with BlockRuntime.session(DATA_DIR / "block", iscsi_port=3260) as rt:
                info = rt.export("exp-7", "nbd", path)
        """
        state_dir = Path(state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / "block.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            rt = cls(state_dir, **kwargs)
            rt.start()
            try:
                yield rt
            finally:
                rt.detach()
        finally:
            os.close(fd)

    def health(self) -> dict:
        """{protocol: transport health dict}."""
        return {p: t.health() for p, t in self.transports.items()}

    def transport_for(self, protocol: str) -> Transport:
        """The transport that serves ``protocol``."""
        if protocol in self.unavailable:
            raise DaemonError(f"{protocol} exports are unavailable on this host: "
                              f"{self.unavailable[protocol]}")
        try:
            return self.transports[protocol]
        except KeyError:
            raise InvalidExport(f"protocol {protocol!r} is not available here; use one of "
                                f"{', '.join(self.transports)}") from None

    def find(self, export_id: str) -> Transport:
        """The transport holding ``export_id``."""
        for t in self._unique():
            if export_id in t.list_exports():
                return t
        raise ExportNotFound(f"no block export {export_id}")

    def export(self, export_id: str, protocol: str, volume_path: str, *,
               read_only: bool = False, host_group: HostGroup | None = None,
               qos: QosLimits | None = None) -> dict:
        """Export a volume; return the connection info (see each transport's docstring)."""
        check_export_id(export_id)
        transport = self.transport_for(protocol)
        for t in self._unique():
            if t is not transport and export_id in t.list_exports():
                raise ExportExists(f"export id {export_id} is already used by another protocol")
        return transport.export(export_id, volume_path, protocol=protocol, read_only=read_only,
                                host_group=host_group, qos=qos)

    def unexport(self, export_id: str) -> None:
        self.find(export_id).unexport(export_id)

    def connection_info(self, export_id: str) -> dict:
        return self.find(export_id).connection_info(export_id)

    def repoint(self, export_id: str, volume_path: str) -> dict:
        """Serve an export from another file (the volume moved to another pool) under the
        same connection info; return it. iSCSI and NBD/vhost-user-blk only: an nvmf
        namespace is an SPDK bdev, which does not move."""
        t = self.find(export_id)
        if t is self.nvmf:
            raise InvalidExport(f"export {export_id} is NVMe-oF: its namespace is an SPDK "
                                "bdev and cannot be re-pointed at another file")
        return t.repoint(export_id, volume_path)

    def set_qos(self, export_id: str, qos: QosLimits | None) -> None:
        """Change an export's limits live (NBD/vhost-user-blk and nvmf; tgtd has none)."""
        t = self.find(export_id)
        if t is self.qsd:
            self.qsd.set_qos(export_id, qos)
        elif t is self.nvmf:
            self.nvmf.set_qos(export_id, qos)
        else:
            raise InvalidExport("iSCSI exports (tgtd) have no QoS; use nbd, vhost-user-blk "
                                "or nvmf for a rate-limited export")

    def set_host_group(self, group: HostGroup) -> None:
        """Apply a host group's hosts/CHAP to its iSCSI target and its NVMe-oF exports."""
        if "iscsi" in self.transports:    # else re-applied once tgtd runs (the reconcile)
            self.iscsi.set_host_group(group)
        # nvmf exports are per volume; the plane passes the group again per export when
        # it changes membership (see NvmfTarget.set_hosts)

    def exports_of(self, volume_path: str) -> list[str]:
        """Ids of every export serving ``volume_path``."""
        path = str(volume_path)
        resolved = str(Path(path).resolve()) if path.startswith("/") else path
        return sorted(e for t in self._unique() for e in t.list_exports()
                      if t.volume_of(e) in (path, resolved))

    def check_volume_deletable(self, volume_path: str) -> None:
        """Raise ExportInUse when the volume is exported (the plane calls this before delete)."""
        users = self.exports_of(volume_path)
        if users:
            raise ExportInUse(f"volume {volume_path} is exported ({', '.join(users)}); "
                              "remove its exports before deleting it")

    def volume_resized(self, volume_path: str) -> dict:
        """Make every export of a grown volume show the new size; {export id: size}."""
        return {e: self.find(e).resize(e) for e in self.exports_of(volume_path)}
