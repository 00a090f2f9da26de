"""Volumes of Ceph pools served over NVMe-oF by nvmf_tgt, through SPDK's rbd bdev, on
several targets at once with ANA (Asymmetric Namespace Access), as Ceph's NVMe-oF gateway
(ceph-nvmeof) does.

The volume stays the ``ceph`` driver's: an RBD image named by its ``VolumeInfo.path``,
``rbd:POOL/IMAGE:id=CLIENT:conf=PATH[:keyring=K]``. Each target (an nvmf_tgt with its
:class:`~dataplane.spdk.driver.SpdkDriver`, one per node) opens the image with librbd
(``bdev_rbd_register_cluster`` once per cluster and client, ``bdev_rbd_create``) and serves it
in a subsystem of the same NQN, serial number and namespace UUID, with ANA reporting on, so
that an initiator sees one namespace with a path per target: the listener of one target is
``optimized``, the others ``non_optimized`` (``nvmf_subsystem_listener_set_ana_state``).
Each target gives its controllers IDs from a range of its own (``min_cntlid``/``max_cntlid``):
Linux refuses a second path whose controller ID repeats one it already has in the subsystem.

librbd's exclusive lock moves between the targets' clients as each writes: Ceph keeps the
image consistent, ANA only says which path to prefer. When the optimized target dies, the
host's native NVMe multipath sends I/O down the non-optimized path.

librbd's cache is off on every target (``rbd_cache = false``): with it, librbd acknowledges
writes from memory once it has seen a flush, and a target killed before its next flush loses
them while the host's flush, retried on the other path, succeeds there, so an fsync that
returned would not cover them (seen: a guest's fsynced MiB missing from the image after the
optimized target was killed). Every acknowledged write is in RADOS, as with Ceph's kernel
client (krbd) or tgt's rbd backing store.

The export is recorded in the driver's ``nvmf.json`` like an lvol's (with ``rbd`` and
``ana_state`` in it), so :meth:`SpdkNvmfMixin.reconcile_nvmf` re-creates the cluster, the bdev
and the subsystem after an nvmf_tgt restart.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Optional

from ..ceph.rbd import parse_rbd_path
from ..errors import InUse, InvalidArgument, NotFound
from .nvmf import NQN_BASE
from .qos import assigned_limits, check_qos_limits

ANA_STATES = ("optimized", "non_optimized", "inaccessible")
CNTLID_SPAN = 1000        # controller IDs per target: target i has i*1000+1 .. (i+1)*1000
RBD_PRODUCT = "Ceph Rbd Disk"


def rbd_bdev_name(spec: dict) -> str:
    """The rbd bdev of an image: ``rbd:POOL/IMAGE``."""
    return f"rbd:{spec['pool']}/{spec['image']}"


def _cluster_name(spec: dict) -> str:
    """One registered cluster (one librados connection) per ceph.conf and client."""
    digest = hashlib.sha1(f"{spec['conf']}|{spec['id']}|{spec['keyring']}".encode()).hexdigest()
    return f"ceph-{spec['id']}-{digest[:8]}"


def namespace_uuid(spec: dict) -> str:
    """The namespace UUID every target gives the image (the host joins paths by it)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"strata-rbd:{spec['pool']}/{spec['image']}"))


def cntlid_range(index: int) -> tuple:
    """The controller IDs of the ``index``-th target of an export (0-based)."""
    if not 0 <= index < 0xffef // CNTLID_SPAN:
        raise InvalidArgument(f"target index {index} is out of range")
    return index * CNTLID_SPAN + 1, (index + 1) * CNTLID_SPAN


class SpdkRbdMixin:
    """RBD-backed NVMe-oF exports of :class:`~dataplane.spdk.driver.SpdkDriver`."""

    def export_rbd_nvmf(self, volume_path: str, *, traddr: str, trsvcid: int,
                        ana_state: str = "optimized", target_index: int = 0,
                        hosts: Optional[list] = None, nqn: Optional[str] = None,
                        host_keys: Optional[dict] = None, qos: Optional[dict] = None) -> dict:
        """Serve the ceph volume ``volume_path`` (an ``rbd:`` path) on this target's
        ``traddr:trsvcid`` with the listener in ``ana_state``; ``target_index`` picks this
        target's controller IDs (each target of one export needs its own index).
        ``host_keys`` = {host NQN: DH-HMAC-CHAP secret}, as for an lvol's export; ``qos`` =
        the rbd bdev's limits on this target (``bdev_set_qos_limit``'s keys, 0 = none)."""
        spec = parse_rbd_path(volume_path)
        if spec["snap"]:
            raise InvalidArgument("volume_path: a snapshot cannot be exported read-write; "
                                  "clone it to a volume first")
        if not spec["pool"] or not spec["image"] or not spec["conf"]:
            raise InvalidArgument(f"volume_path: {volume_path!r} names no pool, image or conf")
        self._check_ana_state(ana_state)
        self._check_hosts(hosts, host_keys)
        limits = _limits(qos)
        nqn = nqn or f"{NQN_BASE}:rbd.{spec['pool']}.{spec['image']}"
        exports = self._nvmf_load()
        for other, e in exports.items():
            if e.get("rbd") and (e["pool"], e["volume"]) == (spec["pool"], spec["image"]) \
                    and other != nqn:
                raise InUse(f"volume {spec['image']!r} is already exported as {other}")
        old_keys = exports.get(nqn, {}).get("keys", {})
        keys = self._put_keys(nqn, host_keys or {}, old_keys)
        exports[nqn] = {"pool": spec["pool"], "volume": spec["image"], "traddr": traddr,
                        "trsvcid": int(trsvcid), "keys": keys, "qos": limits,
                        "hosts": None if hosts is None else sorted(hosts),
                        "rbd": {k: spec[k] for k in ("pool", "image", "id", "conf", "keyring")},
                        "ana_state": ana_state, "cntlid": list(cntlid_range(target_index))}
        self._nvmf_save(exports)
        try:
            self.reconcile_nvmf()
        except Exception:
            exports.pop(nqn)
            self._nvmf_save(exports)
            self._drop_subsystem(nqn)
            self._drop_rbd_bdev(rbd_bdev_name(spec))
            self._drop_keys(keys, keep=old_keys)
            raise
        self._drop_keys(old_keys, keep=keys)
        return self._nvmf_info(nqn, exports[nqn])

    def set_nvmf_ana_state(self, nqn: str, ana_state: str) -> dict:
        """Change this target's ANA state for an RBD export (e.g. make it the optimized path)."""
        self._check_ana_state(ana_state)
        exports = self._nvmf_load()
        if nqn not in exports or not exports[nqn].get("rbd"):
            raise NotFound(f"no RBD export {nqn} on this target")
        exports[nqn]["ana_state"] = ana_state
        self._nvmf_save(exports)
        self.reconcile_nvmf()
        return self._nvmf_info(nqn, exports[nqn])

    def set_rbd_nvmf_hosts(self, nqn: str, hosts: Optional[list],
                           host_keys: Optional[dict] = None) -> dict:
        """Change the host NQNs allowed to connect to an RBD export on this target (and their
        DH-HMAC-CHAP keys), live."""
        self._check_hosts(hosts, host_keys)
        exports = self._rbd_export(nqn)
        old = exports[nqn].get("keys", {})
        exports[nqn]["hosts"] = None if hosts is None else sorted(hosts)
        exports[nqn]["keys"] = self._put_keys(nqn, host_keys or {}, old)
        self._nvmf_save(exports)
        plan = self.reconcile_nvmf()
        self._drop_keys(old, keep=exports[nqn]["keys"])
        return {**self._nvmf_info(nqn, exports[nqn]), "plan": plan}

    def set_rbd_nvmf_qos(self, nqn: str, qos: Optional[dict]) -> dict:
        """Set the rate limits of an RBD export on this target, live (None or 0 = none)."""
        limits = _limits(qos)
        exports = self._rbd_export(nqn)
        exports[nqn]["qos"] = limits
        self._nvmf_save(exports)
        plan = self.reconcile_nvmf()
        return {**self._nvmf_info(nqn, exports[nqn]), "plan": plan}

    def _rbd_export(self, nqn: str) -> dict:
        """The recorded exports, NotFound unless ``nqn`` is an RBD export among them."""
        exports = self._nvmf_load()
        if nqn not in exports or not exports[nqn].get("rbd"):
            raise NotFound(f"no RBD export {nqn} on this target")
        return exports

    def unexport_rbd_nvmf(self, nqn: str) -> None:
        """Delete an RBD export's subsystem and close its image on this target."""
        exports = self._nvmf_load()
        e = exports.get(nqn)
        if e is None or not e.get("rbd"):
            raise NotFound(f"no RBD export {nqn} on this target")
        self._drop_subsystem(nqn)
        self._drop_rbd_bdev(rbd_bdev_name(e["rbd"]))
        self._drop_keys(e.get("keys", {}), keep={})
        del exports[nqn]
        self._nvmf_save(exports)

    @staticmethod
    def _check_ana_state(state: str) -> None:
        if state not in ANA_STATES:
            raise InvalidArgument(f"ana_state: {state!r} is not one of {', '.join(ANA_STATES)}")

    def _ensure_rbd_bdev(self, rbd: dict) -> str:
        """The image's rbd bdev on this target, created (with its cluster) when missing."""
        name = rbd_bdev_name(rbd)
        if self._bdev(name):
            return name
        cluster = _cluster_name(rbd)
        try:
            self.rpc.call("bdev_rbd_get_clusters_info", name=cluster)
        except NotFound:
            params = {"name": cluster, "user_id": rbd["id"], "config_file": rbd["conf"],
                      "config_param": {"rbd_cache": "false"}}
            if rbd.get("keyring"):
                params["key_file"] = rbd["keyring"]
            self.rpc.call("bdev_rbd_register_cluster", **params)
        self.rpc.call("bdev_rbd_create", name=name, pool_name=rbd["pool"],
                      rbd_name=rbd["image"], block_size=512, cluster_name=cluster,
                      uuid=namespace_uuid(rbd))
        return name

    def _drop_rbd_bdev(self, name: str) -> None:
        if self._bdev(name):
            self.rpc.call("bdev_rbd_delete", name=name)

    def _drop_stale_rbd_bdevs(self, exports: dict) -> list:
        """Close the images no recorded export serves (left by an unexport cut short)."""
        wanted = {rbd_bdev_name(e["rbd"]) for e in exports.values() if e.get("rbd")}
        dropped = []
        for b in self.rpc.call("bdev_get_bdevs"):
            if b.get("product_name") == RBD_PRODUCT and b["name"] not in wanted:
                self.rpc.call("bdev_rbd_delete", name=b["name"])
                dropped.append(f"rbd bdev {b['name']}")
        return dropped

    def _reconcile_rbd_qos(self, bdev: str, e: dict, plan: dict) -> None:
        """Set the rbd bdev's limits where the target's differ from the record (the bdev is
        open by its namespace by then: SPDK changes limits only on an open bdev)."""
        want = _limits(e.get("qos"))
        b = self._bdev(bdev)
        if b is not None and assigned_limits(b) != want:
            self.rpc.call("bdev_set_qos_limit", name=bdev, **want)
            plan["add"].append(f"{bdev} QoS {want}")

    def _reconcile_ana(self, nqn: str, e: dict, plan: dict) -> None:
        """Set the listener's ANA state where the target's differs from the record."""
        want = e["ana_state"]
        address = {"trtype": "TCP", "traddr": e["traddr"], "trsvcid": str(e["trsvcid"]),
                   "adrfam": "IPv4"}
        for l in self.rpc.call("nvmf_subsystem_get_listeners", nqn=nqn):
            a = l.get("address", {})
            if (a.get("traddr"), str(a.get("trsvcid"))) != (e["traddr"], str(e["trsvcid"])):
                continue
            states = {s.get("ana_state") for s in l.get("ana_states", [])}
            if states != {want}:
                self.rpc.call("nvmf_subsystem_listener_set_ana_state", nqn=nqn,
                              listen_address=address, ana_state=want)
                plan["add"].append(f"{nqn} listener {e['traddr']}:{e['trsvcid']} {want}")


def _limits(qos: Optional[dict]) -> dict:
    """An export's recorded limits: every key, 0 for none."""
    return {k: v or 0 for k, v in check_qos_limits(qos or {}).items()}


def export_multipath(targets: list, volume_path: str, hosts: Optional[list] = None,
                     optimized: int = 0, host_keys: Optional[dict] = None,
                     qos: Optional[dict] = None) -> dict:
    """Serve a ceph volume from every target of ``targets`` — [(SpdkDriver, traddr,
    trsvcid), ...], one per node — with ``targets[optimized]`` the optimized path and the
    others non-optimized, the same hosts, DH-HMAC-CHAP keys and QoS limits on each; return
    {"subsystem_nqn", "nsid", "paths": [{traddr, trsvcid, ana_state}, ...]}. Undone on every
    target when one fails."""
    done, paths = [], []
    try:
        for i, (driver, traddr, trsvcid) in enumerate(targets):
            state = "optimized" if i == optimized else "non_optimized"
            info = driver.export_rbd_nvmf(volume_path, traddr=traddr, trsvcid=trsvcid,
                                          ana_state=state, target_index=i, hosts=hosts,
                                          host_keys=host_keys, qos=qos)
            done.append((driver, info["subsystem_nqn"]))
            paths.append({"traddr": traddr, "trsvcid": str(trsvcid), "ana_state": state})
    except Exception:
        for driver, nqn in done:
            driver.unexport_rbd_nvmf(nqn)
        raise
    return {"protocol": "nvmf", "trtype": "tcp", "subsystem_nqn": info["subsystem_nqn"],
            "nsid": 1, "paths": paths}
