"""NVMe-oF RPCs of the FAKE spdk_tgt (a fake: spdk_tgt cannot be installed here).

Mirrors SPDK's nvmf_* methods: transports, subsystems with serial/model numbers,
namespaces backed by bdevs (nsid allocated from 1), listeners (transport must exist),
allowed host NQNs and allow_any_host, plus the always-present discovery subsystem in
``nvmf_get_subsystems``. Error replies use SPDK's codes and wording.
"""

from __future__ import annotations

import re

from .spdk_state import DISCOVERY_NQN, RpcError, invalid_params

NQN_RE = re.compile(r"^nqn\.\d{4}-\d{2}\.[^:]+(:.+)?$")


class NvmfRpcs:
    """Mixin for SpdkState: ``self.transports`` and ``self.subsystems`` hold the state."""

    def rpc_nvmf_create_transport(self, trtype, **opts):
        tr = trtype.upper()
        if tr not in ("TCP", "RDMA", "VFIOUSER"):
            raise invalid_params(f"Invalid transport type '{trtype}'")
        if tr in self.transports:
            raise invalid_params(f"Transport type '{tr}' already exists")
        self.transports[tr] = {"trtype": tr, **opts}
        return True

    def rpc_nvmf_get_transports(self, trtype=None, tgt_name=None):
        if trtype is not None:
            if trtype.upper() not in self.transports:
                raise invalid_params("Invalid parameters")
            return [self.transports[trtype.upper()]]
        return list(self.transports.values())

    def _sub(self, nqn: str) -> dict:
        sub = self.subsystems.get(nqn)
        if sub is None:
            raise invalid_params(f"Unable to find subsystem with NQN {nqn}")
        return sub

    def rpc_nvmf_create_subsystem(self, nqn, serial_number="00000000000000000000",
                                  model_number="SPDK bdev Controller", allow_any_host=False,
                                  max_namespaces=0, tgt_name=None, **_):
        if not NQN_RE.match(nqn) or len(nqn) > 223 or nqn in self.subsystems \
                or nqn == DISCOVERY_NQN:
            raise RpcError(-32603, f"Unable to create subsystem {nqn}")
        self.subsystems[nqn] = {"nqn": nqn, "subtype": "NVMe", "listen_addresses": [],
                                "allow_any_host": bool(allow_any_host), "hosts": [],
                                "serial_number": serial_number, "model_number": model_number,
                                "max_namespaces": max_namespaces, "min_cntlid": 1,
                                "max_cntlid": 65519, "namespaces": []}
        return True

    def rpc_nvmf_delete_subsystem(self, nqn, tgt_name=None):
        self._sub(nqn)
        del self.subsystems[nqn]
        return True

    def rpc_nvmf_get_subsystems(self, nqn=None, tgt_name=None):
        discovery = {"nqn": DISCOVERY_NQN, "subtype": "Discovery", "listen_addresses": [],
                     "allow_any_host": True, "hosts": []}
        subs = [discovery] + list(self.subsystems.values())
        if nqn is not None:
            subs = [s for s in subs if s["nqn"] == nqn]
            if not subs:
                raise invalid_params(f"Unable to find subsystem with NQN {nqn}")
        return subs

    def rpc_nvmf_subsystem_add_ns(self, nqn, namespace, tgt_name=None, **_):
        sub = self._sub(nqn)
        if not isinstance(namespace, dict) or "bdev_name" not in namespace:
            raise invalid_params()
        try:
            bdev = self.find_bdev(namespace["bdev_name"])
        except RpcError:
            raise invalid_params("Unable to add ns, subsystem in invalid state") from None
        used = {ns["nsid"] for ns in sub["namespaces"]}
        nsid = namespace.get("nsid") or next(n for n in range(1, 1 << 16) if n not in used)
        if nsid in used or (sub["max_namespaces"] and nsid > sub["max_namespaces"]):
            raise invalid_params("Unable to add namespace")
        sub["namespaces"].append({"nsid": nsid, "bdev_name": namespace["bdev_name"],
                                  "name": bdev["name"], "uuid": bdev["uuid"]})
        return nsid

    def rpc_nvmf_subsystem_remove_ns(self, nqn, nsid, tgt_name=None):
        sub = self._sub(nqn)
        before = len(sub["namespaces"])
        sub["namespaces"] = [ns for ns in sub["namespaces"] if ns["nsid"] != nsid]
        if len(sub["namespaces"]) == before:
            raise invalid_params("Invalid parameters")
        return True

    def rpc_nvmf_subsystem_add_listener(self, nqn, listen_address, tgt_name=None, **_):
        sub = self._sub(nqn)
        la = dict(listen_address)
        tr = la.get("trtype", "").upper()
        if tr not in self.transports:
            raise invalid_params("Unable to find transport")   # create the transport first
        la["trtype"] = tr
        la.setdefault("adrfam", "IPv4")
        if not la.get("traddr") or not la.get("trsvcid"):
            raise invalid_params()
        key = (tr, la["traddr"], str(la["trsvcid"]))
        for other in self.subsystems.values():
            for l in other["listen_addresses"]:
                if other is sub and (l["trtype"], l["traddr"], str(l["trsvcid"])) == key:
                    raise invalid_params("Listener already exists")
        sub["listen_addresses"].append(la)
        return True

    def rpc_nvmf_subsystem_remove_listener(self, nqn, listen_address, tgt_name=None, **_):
        sub = self._sub(nqn)
        key = (listen_address.get("trtype", "").upper(), listen_address.get("traddr"),
               str(listen_address.get("trsvcid")))
        keep = [l for l in sub["listen_addresses"]
                if (l["trtype"], l["traddr"], str(l["trsvcid"])) != key]
        if len(keep) == len(sub["listen_addresses"]):
            raise invalid_params("Invalid parameters")
        sub["listen_addresses"] = keep
        return True

    def rpc_nvmf_subsystem_add_host(self, nqn, host, tgt_name=None, **_):
        sub = self._sub(nqn)
        if not NQN_RE.match(host):
            raise invalid_params("Invalid parameters")
        if any(h["nqn"] == host for h in sub["hosts"]):
            raise RpcError(-32603, "Internal error")
        sub["hosts"].append({"nqn": host})
        return True

    def rpc_nvmf_subsystem_remove_host(self, nqn, host, tgt_name=None, **_):
        sub = self._sub(nqn)
        if not any(h["nqn"] == host for h in sub["hosts"]):
            raise RpcError(-32603, "Internal error")
        sub["hosts"] = [h for h in sub["hosts"] if h["nqn"] != host]
        return True

    def rpc_nvmf_subsystem_allow_any_host(self, nqn, allow_any_host, tgt_name=None):
        self._sub(nqn)["allow_any_host"] = bool(allow_any_host)
        return True
