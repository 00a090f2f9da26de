"""NVMe-oF/TCP exports of spdk volumes: one subsystem per exported volume.

A subsystem ``<nqn_base>:<pool>.<volume>`` holds the volume's lvol bdev as namespace 1,
listens on TCP ``traddr:trsvcid`` and admits the listed host NQNs (or any host when the
list is None); a host given a DH-HMAC-CHAP key must authenticate with it (:mod:`.dhchap`).
The desired state is kept in ``<state_dir>/nvmf.json`` and re-applied by
:meth:`SpdkNvmfMixin.reconcile_nvmf` (after an spdk_tgt restart) as add/remove sets.
A grown lvol grows its namespace without re-export: SPDK notifies connected hosts.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Optional

from plumbing.atomic import write_json_atomic

from ..errors import InUse, InvalidArgument, NotFound
from .dhchap import DhchapKeys, check_dhchap_key
from .target import TCP_TRANSPORT

NQN_BASE = "nqn.2026-01.io.strata"
HOST_NQN_RE = re.compile(r"^nqn\.\d{4}-\d{2}\.[^:\s]+(:\S+)?$")


def _serial(nqn: str) -> str:
    """A stable 20-character controller serial number for a subsystem."""
    return "STRATA" + str(int(hashlib.sha1(nqn.encode()).hexdigest(), 16) % 10**14).zfill(14)


class SpdkNvmfMixin:
    """NVMe-oF methods of :class:`dataplane.spdk.driver.SpdkDriver` (needs ``self.rpc``)."""

    def _nvmf_path(self):
        return self.state_dir / "nvmf.json"

    @property
    def dhchap_keys(self) -> DhchapKeys:
        return DhchapKeys(self.rpc, self.state_dir / "nvmf-keys")

    def _nvmf_load(self) -> dict:
        try:
            return json.loads(self._nvmf_path().read_text())
        except FileNotFoundError:
            return {}

    def _nvmf_save(self, exports: dict) -> None:
        write_json_atomic(self._nvmf_path(), exports, indent=2, sort_keys=True)

    def _refuse_if_exported(self, pool: str, name: Optional[str]) -> None:
        for nqn, e in self._nvmf_load().items():
            if not e.get("rbd") and e["pool"] == pool and (name is None or e["volume"] == name):
                what = f"volume {e['volume']!r}" if name else f"pool {pool!r}"
                raise InUse(f"{what} is exported over NVMe-oF as {nqn}; unexport it first")

    def nvmf_exports(self) -> list:
        """Every recorded NVMe-oF export (dicts as returned by export_volume_nvmf)."""
        return [self._nvmf_info(nqn, e) for nqn, e in sorted(self._nvmf_load().items())]

    @staticmethod
    def _nvmf_info(nqn: str, e: dict) -> dict:
        info = {"protocol": "nvmf", "subsystem_nqn": nqn, "trtype": "tcp", "adrfam": "ipv4",
                "traddr": e["traddr"], "trsvcid": str(e["trsvcid"]), "nsid": 1,
                "pool": e["pool"], "volume": e["volume"], "hosts": e["hosts"],
                "dhchap_hosts": sorted(e.get("keys", {}))}
        if e.get("rbd"):
            info["ana_state"] = e["ana_state"]
            info["qos"] = e.get("qos")
        return info

    def export_volume_nvmf(self, pool: str, name: str, hosts: Optional[list] = None,
                           traddr: str = "127.0.0.1", trsvcid: int = 4420,
                           nqn: Optional[str] = None, host_keys: Optional[dict] = None) -> dict:
        """Export a volume over NVMe-oF/TCP; ``hosts`` = allowed host NQNs (None = any host);
        ``host_keys`` = {host NQN: DH-HMAC-CHAP secret} for the hosts that must authenticate."""
        self.volume_info(pool, name)
        self._check_hosts(hosts, host_keys)
        nqn = nqn or f"{NQN_BASE}:{pool}.{name}"
        exports = self._nvmf_load()
        for other, e in exports.items():
            if not e.get("rbd") and (e["pool"], e["volume"]) == (pool, name) and other != nqn:
                raise InUse(f"volume {name!r} is already exported as {other}")
        old_keys = exports.get(nqn, {}).get("keys", {})
        keys = self._put_keys(nqn, host_keys or {}, old_keys)
        exports[nqn] = {"pool": pool, "volume": name, "traddr": traddr,
                        "trsvcid": int(trsvcid), "hosts": None if hosts is None else sorted(hosts),
                        "keys": keys}
        self._nvmf_save(exports)
        try:
            self.reconcile_nvmf()
        except Exception:
            exports.pop(nqn)
            self._nvmf_save(exports)
            self._drop_subsystem(nqn)
            self._drop_keys(keys, keep=old_keys)
            raise
        self._drop_keys(old_keys, keep=keys)
        return self._nvmf_info(nqn, exports[nqn])

    def set_nvmf_hosts(self, pool: str, name: str, hosts: Optional[list],
                       host_keys: Optional[dict] = None) -> dict:
        """Change the host NQNs allowed to connect to a volume's subsystem (and their
        DH-HMAC-CHAP keys), live."""
        self._check_hosts(hosts, host_keys)
        exports = self._nvmf_load()
        nqn = self._nqn_of(exports, pool, name)
        old = exports[nqn].get("keys", {})
        exports[nqn]["hosts"] = None if hosts is None else sorted(hosts)
        exports[nqn]["keys"] = self._put_keys(nqn, host_keys or {}, old)
        self._nvmf_save(exports)
        plan = self.reconcile_nvmf()
        self._drop_keys(old, keep=exports[nqn]["keys"])
        return {**self._nvmf_info(nqn, exports[nqn]), "plan": plan}

    def unexport_volume_nvmf(self, pool: str, name: str) -> None:
        """Delete the volume's subsystem (connected hosts lose the namespace)."""
        exports = self._nvmf_load()
        nqn = self._nqn_of(exports, pool, name)
        self._drop_subsystem(nqn)
        self._drop_keys(exports[nqn].get("keys", {}), keep={})
        del exports[nqn]
        self._nvmf_save(exports)

    @staticmethod
    def _check_hosts(hosts: Optional[list], host_keys: Optional[dict]) -> None:
        for h in hosts or []:
            if not HOST_NQN_RE.match(h):
                raise InvalidArgument(f"host NQN {h!r} is not an NQN (nqn.yyyy-mm.domain:...)")
        for h, key in (host_keys or {}).items():
            if hosts is None or h not in hosts:
                raise InvalidArgument(f"dhchap_key: host {h} has a key but is not among the "
                                      "export's hosts")
            check_dhchap_key(key, f"dhchap_key of {h}")

    def _drop_keys(self, keys: dict, keep: dict) -> None:
        for name in set(keys.values()) - set(keep.values()):
            self.dhchap_keys.drop(name)

    def _put_keys(self, nqn: str, host_keys: dict, old: dict) -> dict:
        """{host: keyring name}, the key files written (``old``: the names recorded before)."""
        return {host: self.dhchap_keys.put(nqn, host, secret, old.get(host))
                for host, secret in sorted(host_keys.items())}

    @staticmethod
    def _nqn_of(exports: dict, pool: str, name: str) -> str:
        for nqn, e in exports.items():
            if not e.get("rbd") and (e["pool"], e["volume"]) == (pool, name):
                return nqn
        raise NotFound(f"volume {name!r} of pool {pool!r} is not exported over NVMe-oF")

    def _drop_subsystem(self, nqn: str) -> None:
        try:
            self.rpc.call("nvmf_delete_subsystem", nqn=nqn)
        except (NotFound, InvalidArgument):
            pass        # already gone

    def reconcile_nvmf(self) -> dict:
        """Make spdk_tgt's subsystems match the record; return {"add": [...], "remove": [...]}."""
        exports = self._nvmf_load()
        plan = {"add": [], "remove": []}
        if exports and not any(t.get("trtype", "").upper() == "TCP"
                               for t in self.rpc.call("nvmf_get_transports")):
            self.rpc.call("nvmf_create_transport", **TCP_TRANSPORT)
            plan["add"].append("transport TCP")
        live = {s["nqn"]: s for s in self.rpc.call("nvmf_get_subsystems")
                if s.get("subtype") == "NVMe"}
        for nqn in sorted(live):
            if nqn.startswith(NQN_BASE + ":") and nqn not in exports:
                self.rpc.call("nvmf_delete_subsystem", nqn=nqn)
                plan["remove"].append(f"subsystem {nqn}")
        plan["remove"] += self._drop_stale_rbd_bdevs(exports)
        for nqn, e in sorted(exports.items()):
            sub = live.get(nqn)
            any_host = e["hosts"] is None
            if sub is None:
                # an RBD export is served by several targets: ANA says which path to prefer
                ana = ({"ana_reporting": True, "min_cntlid": e["cntlid"][0],
                        "max_cntlid": e["cntlid"][1]} if e.get("rbd") else {})
                self.rpc.call("nvmf_create_subsystem", nqn=nqn, allow_any_host=any_host,
                              serial_number=_serial(nqn),
                              model_number="Strata volume", max_namespaces=1, **ana)
                plan["add"].append(f"subsystem {nqn}")
                sub = {"namespaces": [], "listen_addresses": [], "hosts": [],
                       "allow_any_host": any_host}
            bdev = (self._ensure_rbd_bdev(e["rbd"]) if e.get("rbd")
                    else f"{e['pool']}/{e['volume']}")
            # SPDK names a namespace's bdev by its own name (an lvol's is its UUID)
            b = self._bdev(bdev)
            names = {bdev} | ({b["name"], *b.get("aliases", [])} if b else set())
            if not any(ns.get("bdev_name") in names for ns in sub["namespaces"]):
                for ns in sub["namespaces"]:
                    self.rpc.call("nvmf_subsystem_remove_ns", nqn=nqn, nsid=ns["nsid"])
                self.rpc.call("nvmf_subsystem_add_ns", nqn=nqn,
                              namespace={"bdev_name": bdev, "nsid": 1})
                plan["add"].append(f"{nqn} namespace {bdev}")
            want = ("TCP", e["traddr"], str(e["trsvcid"]))
            have = {(l.get("trtype", "").upper(), l.get("traddr"), str(l.get("trsvcid")))
                    for l in sub["listen_addresses"]}
            for tr, addr, svc in sorted(have - {want}):
                self.rpc.call("nvmf_subsystem_remove_listener", nqn=nqn, listen_address={
                    "trtype": tr, "traddr": addr, "trsvcid": svc, "adrfam": "IPv4"})
                plan["remove"].append(f"{nqn} listener {addr}:{svc}")
            if want not in have:
                self.rpc.call("nvmf_subsystem_add_listener", nqn=nqn, listen_address={
                    "trtype": "TCP", "traddr": e["traddr"], "trsvcid": str(e["trsvcid"]),
                    "adrfam": "IPv4"})
                plan["add"].append(f"{nqn} listener {e['traddr']}:{e['trsvcid']}")
            if e.get("rbd"):
                self._reconcile_rbd_qos(bdev, e, plan)
                self._reconcile_ana(nqn, e, plan)
            keys = e.get("keys", {})
            self.dhchap_keys.load(keys.values())      # an nvmf_tgt restart empties the keyring
            # a host whose key changed (or came or went) is admitted again with the new one
            live_hosts = {(h["nqn"], h.get("dhchap_key")) for h in sub["hosts"]}
            want_hosts = {(h, keys.get(h)) for h in e["hosts"] or []}
            for h, key in sorted(live_hosts - want_hosts, key=str):
                self.rpc.call("nvmf_subsystem_remove_host", nqn=nqn, host=h)
                plan["remove"].append(f"{nqn} host {h}" + (" (DH-HMAC-CHAP)" if key else ""))
            for h, key in sorted(want_hosts - live_hosts, key=str):
                self.rpc.call("nvmf_subsystem_add_host", nqn=nqn, host=h, dhchap_key=key)
                plan["add"].append(f"{nqn} host {h}" + (" (DH-HMAC-CHAP)" if key else ""))
            if bool(sub["allow_any_host"]) != any_host:
                self.rpc.call("nvmf_subsystem_allow_any_host", nqn=nqn, allow_any_host=any_host)
                plan["add" if any_host else "remove"].append(f"{nqn} any host")
        return plan
