"""NVMe-oF/TCP exports through spdk_tgt, as a Transport over the spdk dataplane driver.

spdk_tgt is both the volume engine and the NVMe-oF target, so this transport only maps
export ids to the driver's subsystems (``SpdkDriver.export_volume_nvmf``). ``volume_path``
is the spdk volume's path as the driver reports it: ``"<pool>/<volume>"``, or a ceph
volume's ``rbd:POOL/IMAGE:...`` path, served through SPDK's rbd bdev as this node's
optimized path (``SpdkDriver.export_rbd_nvmf``; dataplane/spdk/rbd.py serves one from
several nodes with ANA). The target
process (SPDK's nvmf_tgt) is `strata up`'s child (services/block/up.py), not this
transport's: ``start`` re-applies the recorded subsystems, ``stop`` only lets go of it.
"""

from __future__ import annotations

import json
from pathlib import Path

from dataplane.ceph.rbd import image_size
from plumbing.atomic import write_json_atomic

from .base import (
    DaemonError,
    ExportExists,
    ExportNotFound,
    HostGroup,
    InvalidExport,
    QosLimits,
    Transport,
    check_export_id,
)


class NvmfTarget(Transport):
    """Export spdk volumes over NVMe-oF/TCP on ``host:port``; ACL = the group's host NQNs."""

    protocols = ("nvmf",)

    def __init__(self, driver, state_dir: str | Path, *, host: str = "127.0.0.1",
                 port: int = 4420):
        self.driver = driver
        self.state_dir = Path(state_dir)
        self.host = host
        self.port = port
        self.record_path = self.state_dir / "nvmf-exports.json"
        try:
            self._exports: dict[str, dict] = json.loads(self.record_path.read_text())
        except FileNotFoundError:
            self._exports = {}

    def start(self) -> None:
        """Re-apply the recorded subsystems (after an spdk_tgt restart)."""
        self.driver.reconcile_nvmf()

    def stop(self) -> None:
        """Nothing to stop: nvmf_tgt is `strata up`'s child, not this runtime's."""
        self.driver.rpc.close()

    def detach(self) -> None:
        self.driver.rpc.close()

    def health(self) -> dict:
        try:
            version = self.driver.rpc.call("spdk_get_version")["version"]
            return {"running": True, "pid": None, "exports": len(self._exports),
                    "detail": version, "portal": f"{self.host}:{self.port}"}
        except Exception as exc:     # any failure means "not healthy", reported as text
            return {"running": False, "pid": None, "exports": len(self._exports),
                    "detail": str(exc), "portal": f"{self.host}:{self.port}"}

    def export(self, export_id: str, volume_path: str, *, protocol: str | None = "nvmf",
               read_only: bool = False, host_group: HostGroup | None = None,
               qos: QosLimits | None = None) -> dict:
        """Create the volume's subsystem; only the group's host NQNs may connect."""
        check_export_id(export_id)
        if protocol not in (None, "nvmf"):
            raise InvalidExport(f"spdk_tgt here serves nvmf, not {protocol}")
        if read_only:
            raise InvalidExport("read-only NVMe-oF namespaces are not supported; export a "
                                "snapshot clone instead")
        if volume_path.startswith("rbd:"):
            return self._export_rbd(export_id, volume_path, host_group, qos)
        pool, sep, volume = volume_path.partition("/")
        if not sep:
            raise InvalidExport(f"{volume_path!r} is not an spdk volume (expected pool/volume)")
        if export_id in self._exports:
            if self._exports[export_id] != {"pool": pool, "volume": volume}:
                raise ExportExists(f"export {export_id} already exists; unexport it first")
            return self.connection_info(export_id)
        hosts, keys = _hosts_and_keys(host_group)
        self.driver.export_volume_nvmf(pool, volume, hosts=hosts, traddr=self.host,
                                       trsvcid=self.port, host_keys=keys)
        if qos is not None:
            self.set_qos_for(pool, volume, qos)
        self._exports[export_id] = {"pool": pool, "volume": volume}
        self._save()
        return self.connection_info(export_id)

    def _export_rbd(self, export_id: str, volume_path: str, host_group: HostGroup | None,
                    qos: QosLimits | None) -> dict:
        return self.export_path(export_id, volume_path, host_group=host_group, qos=qos)

    def export_path(self, export_id: str, volume_path: str, *,
                    host_group: HostGroup | None = None, ana_state: str = "optimized",
                    target_index: int = 0, qos: QosLimits | None = None) -> dict:
        """Serve a ceph volume (``rbd:`` path) as one path of a multipath export: this node's
        listener in ``ana_state``, controller IDs of ``target_index`` (each node of the
        export has its own), the group's hosts with their DH-HMAC-CHAP keys, ``qos`` on this
        node's rbd bdev. Exported already: the ANA state, hosts, keys and QoS follow, live."""
        hosts, keys = _hosts_and_keys(host_group)
        limits = spdk_limits(qos)
        rec = self._exports.get(export_id)
        if rec is not None:
            if rec.get("rbd") != volume_path or rec.get("target_index", 0) != target_index:
                raise ExportExists(f"export {export_id} already exists; unexport it first")
            self.driver.set_rbd_nvmf_hosts(rec["nqn"], hosts, host_keys=keys)
            self.driver.set_rbd_nvmf_qos(rec["nqn"], limits)
            if rec.get("ana_state", "optimized") != ana_state:
                self.driver.set_nvmf_ana_state(rec["nqn"], ana_state)
                rec["ana_state"] = ana_state
                self._save()
            return self.connection_info(export_id)
        info = self.driver.export_rbd_nvmf(volume_path, traddr=self.host, trsvcid=self.port,
                                           hosts=hosts, ana_state=ana_state,
                                           target_index=target_index, host_keys=keys,
                                           qos=limits)
        self._exports[export_id] = {"rbd": volume_path, "nqn": info["subsystem_nqn"],
                                    "ana_state": ana_state, "target_index": target_index}
        self._save()
        return self.connection_info(export_id)

    def set_qos_for(self, pool: str, volume: str, qos: QosLimits) -> dict:
        """Set an spdk volume's limits (see :func:`spdk_limits`)."""
        return self.driver.set_volume_qos(pool, volume, **spdk_limits(qos))

    def set_qos(self, export_id: str, qos: QosLimits | None) -> dict:
        """Change an export's limits live (None: none); a ceph volume's on this node's path."""
        rec = self._get(export_id)
        if rec.get("rbd"):
            return self.driver.set_rbd_nvmf_qos(rec["nqn"], spdk_limits(qos))
        return self.set_qos_for(rec["pool"], rec["volume"], qos or QosLimits())

    def set_hosts(self, export_id: str, host_group: HostGroup | None) -> dict:
        """Change the allowed host NQNs and their DH-HMAC-CHAP keys live."""
        rec = self._get(export_id)
        hosts, keys = _hosts_and_keys(host_group)
        if rec.get("rbd"):
            return self.driver.set_rbd_nvmf_hosts(rec["nqn"], hosts, host_keys=keys)
        return self.driver.set_nvmf_hosts(rec["pool"], rec["volume"], hosts, host_keys=keys)

    def unexport(self, export_id: str) -> None:
        rec = self._get(export_id)
        if rec.get("rbd"):
            self.driver.unexport_rbd_nvmf(rec["nqn"])
        else:
            self.driver.unexport_volume_nvmf(rec["pool"], rec["volume"])
        del self._exports[export_id]
        self._save()

    def resize(self, export_id: str) -> int:
        """The namespace follows the lvol's size by itself; return the current size."""
        rec = self._get(export_id)
        if rec.get("rbd"):      # SPDK's rbd bdev follows the image's size (librbd's watch)
            return image_size(rec["rbd"])
        return self.driver.volume_info(rec["pool"], rec["volume"]).size_bytes

    def connection_info(self, export_id: str) -> dict:
        """{"protocol": "nvmf", "subsystem_nqn", "traddr", "trsvcid", "trtype": "tcp", "nsid"}."""
        rec = self._get(export_id)
        for e in self.driver.nvmf_exports():
            if (e["subsystem_nqn"] == rec["nqn"] if rec.get("rbd")
                    else (e["pool"], e["volume"]) == (rec["pool"], rec["volume"])):
                return {"protocol": "nvmf", "export_id": export_id,
                        "subsystem_nqn": e["subsystem_nqn"], "trtype": "tcp",
                        "traddr": e["traddr"], "trsvcid": e["trsvcid"], "nsid": e["nsid"],
                        "read_only": False}
        raise DaemonError(f"export {export_id} has no subsystem in the spdk driver's record")

    def list_exports(self) -> list[str]:
        return sorted(self._exports)

    def volume_of(self, export_id: str) -> str:
        rec = self._get(export_id)
        return rec.get("rbd") or f"{rec['pool']}/{rec['volume']}"

    def _get(self, export_id: str) -> dict:
        try:
            return self._exports[export_id]
        except KeyError:
            raise ExportNotFound(f"no NVMe-oF export {export_id}") from None

    def _save(self) -> None:
        write_json_atomic(self.record_path, self._exports, indent=1, sort_keys=True)


def spdk_limits(qos: QosLimits | None) -> dict:
    """QosLimits as SPDK's per-bdev limits: IOPS read and write together, rounded up to
    SPDK's steps of 1000, and MB/s total, read and write (0 = none; None: no limits)."""
    qos = qos or QosLimits()
    mb = 1_000_000
    iops = qos.iops_total or ((qos.iops_read or 0) + (qos.iops_write or 0)) or 0
    return {"rw_ios_per_sec": (iops + 999) // 1000 * 1000 if iops else 0,
            "rw_mbytes_per_sec": (qos.bps_total or 0) // mb,
            "r_mbytes_per_sec": (qos.bps_read or 0) // mb,
            "w_mbytes_per_sec": (qos.bps_write or 0) // mb}


def _hosts_and_keys(host_group: HostGroup | None) -> tuple:
    """(the group's host NQNs, {NQN: DH-HMAC-CHAP key} of those that have one); (None, None)
    without a group (any host)."""
    if host_group is None:
        return None, None
    hosts = [h for h in host_group.hosts if h.nqn]
    return sorted({h.nqn for h in hosts}), {h.nqn: h.dhchap_key for h in hosts if h.dhchap_key}
