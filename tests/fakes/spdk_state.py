"""State and RPC methods of the FAKE spdk_tgt (see spdk_server.py).

THIS IS A FAKE. A real ``spdk_tgt`` needs hugepages, a userspace NVMe driver and root on
bare metal; it cannot be installed on the development machines, so the spdk dataplane
driver is tested against this model instead. It keeps state the way SPDK does (bdevs
with names, aliases and UUIDs; lvol stores over a base bdev with clusters; thin lvols;
snapshots that turn the origin into a clone; clones; nvmf transports, subsystems,
namespaces, listeners and allowed hosts; per-bdev QoS) and answers with SPDK's result
shapes and error codes (negative errno with strerror text, or JSON-RPC -32602/-32601/
-32603). It stores no data blocks.

Lvol store metadata of AIO bdevs is written into the first 64 KiB of the backing file
(SPDK keeps its blobstore super block on the device too), so deleting and re-creating the
AIO bdev -- or restarting the fake -- finds the lvol store again, as SPDK's examine does.
"""

from __future__ import annotations

import errno
import json
import math
import os
import uuid as uuidlib

MiB = 1 << 20
META_MAGIC = b"STRATA-FAKE-SPDK-LVS\n"
META_SIZE = 64 * 1024
DISCOVERY_NQN = "nqn.2014-08.org.nvmexpress.discovery"


class RpcError(Exception):
    """An error reply: ``code`` and ``message`` exactly as spdk_tgt would send them."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def errno_error(num: int) -> RpcError:
    """SPDK's usual failure reply: code -errno, message strerror(errno)."""
    return RpcError(-num, os.strerror(num))


def invalid_params(msg: str = "Invalid parameters") -> RpcError:
    return RpcError(-32602, msg)


class SpdkState:
    """Everything one fake spdk_tgt knows; each ``rpc_<method>`` takes the params as kwargs."""

    def __init__(self, nvme_devices: dict[str, int] | None = None):
        self.bdevs: dict[str, dict] = {}          # name -> bdev (lvol bdevs are named by uuid)
        self.lvstores: dict[str, dict] = {}       # uuid -> lvstore
        self.transports: dict[str, dict] = {}
        self.subsystems: dict[str, dict] = {}
        self.nvme_devices = dict(nvme_devices or {})   # PCIe traddr -> size in bytes

    # ------------------------------------------------------------------ lookups
    def find_bdev(self, name: str) -> dict:
        if name in self.bdevs:
            return self.bdevs[name]
        for b in self.bdevs.values():
            if name in b["aliases"]:
                return b
        raise errno_error(errno.ENODEV)

    def find_lvs(self, uuid: str | None = None, lvs_name: str | None = None) -> dict:
        if (uuid is None) == (lvs_name is None):
            raise invalid_params("Invalid parameters")   # SPDK: exactly one of uuid/lvs_name
        for lvs in self.lvstores.values():
            if lvs["uuid"] == uuid or lvs["name"] == lvs_name:
                return lvs
        raise errno_error(errno.ENODEV)

    def lvols_of(self, lvs: dict) -> list[dict]:
        return [b for b in self.bdevs.values()
                if b.get("lvol") and b["lvol"]["lvol_store_uuid"] == lvs["uuid"]]

    def _new_bdev(self, name: str, product: str, block_size: int, num_blocks: int, **extra) -> dict:
        if name in self.bdevs or any(name in b["aliases"] for b in self.bdevs.values()):
            raise errno_error(errno.EEXIST)
        bdev = {"name": name, "aliases": [], "product_name": product,
                "block_size": block_size, "num_blocks": num_blocks,
                "uuid": str(uuidlib.uuid4()), "claimed": False,
                "assigned_rate_limits": {"rw_ios_per_sec": 0, "rw_mbytes_per_sec": 0,
                                         "r_mbytes_per_sec": 0, "w_mbytes_per_sec": 0},
                "driver_specific": {}}
        bdev.update(extra)
        self.bdevs[name] = bdev
        return bdev

    # ------------------------------------------------------------------ base bdevs
    def rpc_bdev_malloc_create(self, num_blocks, block_size=512, name=None, uuid=None, **_):
        if num_blocks <= 0 or block_size % 512:
            raise invalid_params()
        name = name or f"Malloc{len(self.bdevs)}"
        self._new_bdev(name, "Malloc disk", block_size, num_blocks)
        return name

    def rpc_bdev_malloc_delete(self, name):
        return self._delete_base(name, "Malloc disk")

    def rpc_bdev_aio_create(self, filename, name, block_size=512, **_):
        if not os.path.exists(filename):
            raise errno_error(errno.ENOENT)
        size = os.path.getsize(filename) if os.path.isfile(filename) else _blockdev_size(filename)
        bdev = self._new_bdev(name, "AIO disk", block_size, size // block_size,
                              driver_specific={"aio": {"filename": filename}})
        self._examine(bdev)
        return name

    def rpc_bdev_aio_delete(self, name):
        return self._delete_base(name, "AIO disk")

    def rpc_bdev_nvme_attach_controller(self, name, trtype, traddr, **_):
        if trtype.lower() != "pcie" or traddr not in self.nvme_devices:
            raise errno_error(errno.ENODEV)
        bdev_name = f"{name}n1"
        self._new_bdev(bdev_name, "NVMe disk", 512, self.nvme_devices[traddr] // 512,
                       driver_specific={"nvme": [{"pci_address": traddr}]})
        return [bdev_name]

    def rpc_bdev_nvme_detach_controller(self, name, **_):
        return self._delete_base(f"{name}n1", "NVMe disk")

    def rpc_bdev_raid_create(self, name, raid_level, base_bdevs, strip_size_kb=0, **_):
        if raid_level not in ("raid0", "raid1", "concat", "0", "1"):
            raise invalid_params()
        members = [self.find_bdev(b) for b in base_bdevs]
        if any(m["claimed"] for m in members):
            raise errno_error(errno.EPERM)
        sizes = [m["num_blocks"] * m["block_size"] for m in members]
        size = min(sizes) if raid_level in ("raid1", "1") else sum(sizes)
        bdev = self._new_bdev(name, "Raid Volume", 512, size // 512,
                              driver_specific={"raid": {"raid_level": raid_level,
                                                        "base_bdevs_list": list(base_bdevs)}})
        for m in members:
            m["claimed"] = True
        self._examine(bdev)
        return True

    def rpc_bdev_raid_delete(self, name):
        return self._delete_base(name, "Raid Volume")

    def _delete_base(self, name: str, product: str):
        bdev = self.bdevs.get(name)
        if bdev is None or bdev["product_name"] != product:
            raise errno_error(errno.ENODEV)
        # a removed base bdev unloads (does not destroy) the lvol store on it, like SPDK
        for lvs in list(self.lvstores.values()):
            if lvs["base_bdev"] == name:
                self._unload_lvs(lvs)
        for m in bdev["driver_specific"].get("raid", {}).get("base_bdevs_list", []):
            if m in self.bdevs:
                self.bdevs[m]["claimed"] = False
        del self.bdevs[name]
        self._hot_remove(bdev)
        return True

    def _hot_remove(self, bdev: dict) -> None:
        for sub in self.subsystems.values():
            sub["namespaces"] = [ns for ns in sub["namespaces"] if ns["bdev_name"] != bdev["name"]
                                 and ns["bdev_name"] not in bdev["aliases"]]

    def rpc_bdev_get_bdevs(self, name=None, timeout=None):
        if name is not None:
            return [self.find_bdev(name)]
        return list(self.bdevs.values())

    def rpc_bdev_set_qos_limit(self, name, **limits):
        bdev = self.find_bdev(name)
        keys = ("rw_ios_per_sec", "rw_mbytes_per_sec", "r_mbytes_per_sec", "w_mbytes_per_sec")
        if not limits or set(limits) - set(keys):
            raise invalid_params()
        ios = limits.get("rw_ios_per_sec")
        if ios is not None and ios % 1000:
            raise errno_error(errno.EINVAL)   # SPDK: IOPS limit must be a multiple of 1000
        for k, v in limits.items():
            if not isinstance(v, int) or v < 0:
                raise invalid_params()
            bdev["assigned_rate_limits"][k] = v
        return True

    # ------------------------------------------------------------------ lvol stores
    def rpc_bdev_lvol_create_lvstore(self, bdev_name, lvs_name, cluster_sz=4 * MiB,
                                     clear_method="unmap", **_):
        base = self.find_bdev(bdev_name)
        if base["claimed"]:
            raise errno_error(errno.EBUSY)
        if any(l["name"] == lvs_name for l in self.lvstores.values()):
            raise errno_error(errno.EEXIST)
        if cluster_sz < 8192 or cluster_sz & (cluster_sz - 1):
            raise errno_error(errno.EINVAL)
        size = base["num_blocks"] * base["block_size"]
        total = size // cluster_sz - math.ceil(META_SIZE / cluster_sz) - 1
        if total < 1:
            raise errno_error(errno.ENOSPC)
        lvs = {"uuid": str(uuidlib.uuid4()), "name": lvs_name, "base_bdev": bdev_name,
               "total_data_clusters": total, "free_clusters": total, "block_size": 512,
               "cluster_size": cluster_sz}
        self.lvstores[lvs["uuid"]] = lvs
        base["claimed"] = True
        self._persist(lvs)
        return lvs["uuid"]

    def rpc_bdev_lvol_get_lvstores(self, uuid=None, lvs_name=None):
        if uuid is None and lvs_name is None:
            return [dict(l) for l in self.lvstores.values()]
        return [dict(self.find_lvs(uuid, lvs_name))]

    def rpc_bdev_lvol_delete_lvstore(self, uuid=None, lvs_name=None):
        lvs = self.find_lvs(uuid, lvs_name)
        for b in self.lvols_of(lvs):
            del self.bdevs[b["name"]]
            self._hot_remove(b)
        del self.lvstores[lvs["uuid"]]
        self.bdevs[lvs["base_bdev"]]["claimed"] = False
        self._wipe_meta(lvs)
        return True

    # ------------------------------------------------------------------ lvols
    def _lvol_name_taken(self, lvs: dict, name: str) -> bool:
        return any(b["lvol"]["name"] == name for b in self.lvols_of(lvs))

    def _make_lvol(self, lvs: dict, name: str, clusters: int, thin: bool, **lv) -> dict:
        if not name or len(name) > 63:
            raise errno_error(errno.EINVAL)
        if self._lvol_name_taken(lvs, name):
            raise errno_error(errno.EEXIST)
        alloc = 0 if thin else clusters
        if alloc > lvs["free_clusters"]:
            raise errno_error(errno.ENOSPC)
        lvs["free_clusters"] -= alloc
        uid = str(uuidlib.uuid4())
        bdev = self._new_bdev(uid, "Logical Volume", 512,
                              clusters * lvs["cluster_size"] // 512, uuid=uid)
        bdev["aliases"] = [f"{lvs['name']}/{name}"]
        bdev["lvol"] = {"name": name, "lvol_store_uuid": lvs["uuid"], "thin_provision": thin,
                        "num_allocated_clusters": alloc, "snapshot": False, "clone": False,
                        "base_snapshot": None, "clones": [], "read_only": False}
        self._sync_driver_specific(bdev)
        return bdev

    def _sync_driver_specific(self, bdev: dict) -> None:
        lv = bdev["lvol"]
        lvs = self.lvstores[lv["lvol_store_uuid"]]
        ds = {"lvol_store_uuid": lvs["uuid"], "base_bdev": lvs["base_bdev"],
              "thin_provision": lv["thin_provision"],
              "num_allocated_clusters": lv["num_allocated_clusters"],
              "snapshot": lv["snapshot"], "clone": lv["clone"], "esnap_clone": False}
        if lv["clone"]:
            ds["base_snapshot"] = lv["base_snapshot"]
        if lv["snapshot"]:
            ds["clones"] = list(lv["clones"])
        bdev["driver_specific"] = {"lvol": ds}

    def _lvs_of(self, bdev: dict) -> dict:
        return self.lvstores[bdev["lvol"]["lvol_store_uuid"]]

    def _by_lvol_name(self, lvs: dict, name: str) -> dict:
        for b in self.lvols_of(lvs):
            if b["lvol"]["name"] == name:
                return b
        raise errno_error(errno.ENODEV)

    def find_lvol(self, name: str) -> dict:
        bdev = self.find_bdev(name)
        if "lvol" not in bdev:
            raise errno_error(errno.ENODEV)
        return bdev

    def rpc_bdev_lvol_create(self, lvol_name, size_in_mib, thin_provision=False, uuid=None,
                             lvs_name=None, clear_method=None):
        lvs = self.find_lvs(uuid, lvs_name)
        clusters = math.ceil(size_in_mib * MiB / lvs["cluster_size"])
        bdev = self._make_lvol(lvs, lvol_name, clusters, bool(thin_provision))
        self._persist(lvs)
        return bdev["name"]

    def rpc_bdev_lvol_snapshot(self, lvol_name, snapshot_name):
        origin = self.find_lvol(lvol_name)
        lvs = self._lvs_of(origin)
        if origin["lvol"]["read_only"]:
            raise errno_error(errno.EINVAL)
        clusters = origin["num_blocks"] * 512 // lvs["cluster_size"]
        snap = self._make_lvol(lvs, snapshot_name, clusters, True)
        o, s = origin["lvol"], snap["lvol"]
        # the snapshot takes the origin's clusters and its place in the chain
        s.update(snapshot=True, read_only=True, thin_provision=o["thin_provision"],
                 num_allocated_clusters=o["num_allocated_clusters"], clones=[o["name"]])
        if o["clone"]:
            parent = self._by_lvol_name(lvs, o["base_snapshot"])
            parent["lvol"]["clones"] = [s["name"] if c == o["name"] else c
                                        for c in parent["lvol"]["clones"]]
            s.update(clone=True, base_snapshot=o["base_snapshot"])
            self._sync_driver_specific(parent)
        o.update(clone=True, base_snapshot=s["name"], num_allocated_clusters=0)
        self._sync_driver_specific(snap)
        self._sync_driver_specific(origin)
        self._persist(lvs)
        return snap["name"]

    def rpc_bdev_lvol_clone(self, snapshot_name, clone_name):
        snap = self.find_lvol(snapshot_name)
        lvs = self._lvs_of(snap)
        if not snap["lvol"]["snapshot"]:
            raise errno_error(errno.EINVAL)      # "Cannot create clone of non snapshot lvol"
        clusters = snap["num_blocks"] * 512 // lvs["cluster_size"]
        clone = self._make_lvol(lvs, clone_name, clusters, True)
        clone["lvol"].update(clone=True, base_snapshot=snap["lvol"]["name"])
        snap["lvol"]["clones"].append(clone_name)
        self._sync_driver_specific(clone)
        self._sync_driver_specific(snap)
        self._persist(lvs)
        return clone["name"]

    def rpc_bdev_lvol_resize(self, name, size_in_mib):
        bdev = self.find_lvol(name)
        lv, lvs = bdev["lvol"], self._lvs_of(bdev)
        if lv["read_only"]:
            raise errno_error(errno.EPERM)
        clusters = math.ceil(size_in_mib * MiB / lvs["cluster_size"])
        old = bdev["num_blocks"] * 512 // lvs["cluster_size"]
        if not lv["thin_provision"]:
            grow = clusters - lv["num_allocated_clusters"]
            if grow > lvs["free_clusters"]:
                raise errno_error(errno.ENOSPC)
            lvs["free_clusters"] -= grow
            lv["num_allocated_clusters"] = clusters
        elif clusters < old:
            freed = max(0, lv["num_allocated_clusters"] - clusters)
            lv["num_allocated_clusters"] -= freed
            lvs["free_clusters"] += freed
        bdev["num_blocks"] = clusters * lvs["cluster_size"] // 512
        self._sync_driver_specific(bdev)
        self._persist(lvs)
        return True

    def rpc_bdev_lvol_inflate(self, name):
        bdev = self.find_lvol(name)
        lv, lvs = bdev["lvol"], self._lvs_of(bdev)
        if not lv["clone"]:
            raise errno_error(errno.EINVAL)
        parent = self._by_lvol_name(lvs, lv["base_snapshot"])
        parent["lvol"]["clones"].remove(lv["name"])
        self._sync_driver_specific(parent)
        clusters = bdev["num_blocks"] * 512 // lvs["cluster_size"]
        need = clusters - lv["num_allocated_clusters"]
        if need > lvs["free_clusters"]:
            raise errno_error(errno.ENOSPC)
        lvs["free_clusters"] -= need
        lv.update(clone=False, base_snapshot=None, num_allocated_clusters=clusters)
        self._sync_driver_specific(bdev)
        self._persist(lvs)
        return True

    def rpc_bdev_lvol_delete(self, name):
        bdev = self.find_lvol(name)
        lv, lvs = bdev["lvol"], self._lvs_of(bdev)
        if lv["snapshot"] and len(lv["clones"]) > 1:
            raise errno_error(errno.EBUSY)       # blobstore: snapshot with more than one clone
        if lv["snapshot"] and lv["clones"]:
            # deleting a snapshot with one clone merges it into that clone
            child = self._by_lvol_name(lvs, lv["clones"][0])
            c = child["lvol"]
            c["num_allocated_clusters"] += lv["num_allocated_clusters"]
            lv["num_allocated_clusters"] = 0
            c["clone"] = lv["clone"]
            c["base_snapshot"] = lv["base_snapshot"]
            if lv["clone"]:
                parent = self._by_lvol_name(lvs, lv["base_snapshot"])
                parent["lvol"]["clones"] = [c["name"] if x == lv["name"] else x
                                            for x in parent["lvol"]["clones"]]
                self._sync_driver_specific(parent)
            self._sync_driver_specific(child)
        elif lv["clone"]:
            parent = self._by_lvol_name(lvs, lv["base_snapshot"])
            parent["lvol"]["clones"].remove(lv["name"])
            self._sync_driver_specific(parent)
        lvs["free_clusters"] += lv["num_allocated_clusters"]
        del self.bdevs[bdev["name"]]
        self._hot_remove(bdev)
        self._persist(lvs)
        return True

    def rpc_bdev_lvol_get_lvols(self, lvs_uuid=None, lvs_name=None):
        out = []
        for lvs in self.lvstores.values():
            if lvs_uuid not in (None, lvs["uuid"]) or lvs_name not in (None, lvs["name"]):
                continue
            for b in self.lvols_of(lvs):
                lv = b["lvol"]
                out.append({"alias": b["aliases"][0], "uuid": b["uuid"], "name": lv["name"],
                            "is_thin_provisioned": lv["thin_provision"],
                            "is_snapshot": lv["snapshot"], "is_clone": lv["clone"],
                            "is_esnap_clone": False, "is_degraded": False,
                            "lvs": {"name": lvs["name"], "uuid": lvs["uuid"]}})
        return out

    def write_clusters(self, name: str, clusters: int) -> None:
        """Test helper (not an RPC): pretend a client wrote ``clusters`` new clusters."""
        bdev = self.find_lvol(name)
        lvs = self._lvs_of(bdev)
        clusters = min(clusters, lvs["free_clusters"])
        bdev["lvol"]["num_allocated_clusters"] += clusters
        lvs["free_clusters"] -= clusters
        self._sync_driver_specific(bdev)
        self._persist(lvs)

    # ------------------------------------------------------------------ on-disk metadata
    def _meta_file(self, bdev_name: str) -> str | None:
        bdev = self.bdevs.get(bdev_name)
        if bdev is None:
            return None
        if "aio" in bdev["driver_specific"]:
            return bdev["driver_specific"]["aio"]["filename"]
        members = bdev["driver_specific"].get("raid", {}).get("base_bdevs_list", [])
        return self._meta_file(members[0]) if members else None

    def _persist(self, lvs: dict) -> None:
        path = self._meta_file(lvs["base_bdev"])
        if path is None:
            return
        lvols = [{"uuid": b["uuid"], "num_blocks": b["num_blocks"], "lvol": b["lvol"],
                  "assigned_rate_limits": b["assigned_rate_limits"]}
                 for b in self.lvols_of(lvs)]
        on_raid = "raid" in self.bdevs[lvs["base_bdev"]]["driver_specific"]
        blob = json.dumps({"lvs": lvs, "lvols": lvols, "on_raid": on_raid}).encode()
        if len(blob) + len(META_MAGIC) + 16 > META_SIZE:
            raise errno_error(errno.ENOSPC)
        with open(path, "r+b") as f:
            f.write(META_MAGIC + b"%15d\n" % len(blob) + blob)

    def _wipe_meta(self, lvs: dict) -> None:
        path = self._meta_file(lvs["base_bdev"])
        if path is not None:
            with open(path, "r+b") as f:
                f.write(b"\0" * len(META_MAGIC))

    def _examine(self, bdev: dict) -> None:
        path = self._meta_file(bdev["name"])
        if path is None:
            return
        with open(path, "rb") as f:
            head = f.read(META_SIZE)
        if not head.startswith(META_MAGIC):
            return
        n = int(head[len(META_MAGIC):len(META_MAGIC) + 16])
        meta = json.loads(head[len(META_MAGIC) + 16:len(META_MAGIC) + 16 + n])
        if meta.get("on_raid", False) != ("raid" in bdev["driver_specific"]):
            return       # the store lives on the raid built from this member, not on it
        lvs = meta["lvs"]
        lvs["base_bdev"] = bdev["name"]
        self.lvstores[lvs["uuid"]] = lvs
        bdev["claimed"] = True
        for item in meta["lvols"]:
            b = self._new_bdev(item["uuid"], "Logical Volume", 512, item["num_blocks"],
                               uuid=item["uuid"])
            b["aliases"] = [f"{lvs['name']}/{item['lvol']['name']}"]
            b["lvol"] = item["lvol"]
            b["assigned_rate_limits"] = item["assigned_rate_limits"]
            self._sync_driver_specific(b)

    def _unload_lvs(self, lvs: dict) -> None:
        for b in self.lvols_of(lvs):
            del self.bdevs[b["name"]]
            self._hot_remove(b)
        del self.lvstores[lvs["uuid"]]


def _blockdev_size(path: str) -> int:
    with open(path, "rb") as f:
        return f.seek(0, os.SEEK_END)
