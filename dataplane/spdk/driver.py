"""The ``spdk`` driver: volumes as thin lvols on an SPDK lvol store, driven over JSON-RPC.

Production block engine over NVMe: ``spdk_tgt`` owns the devices; this driver is a thin
JSON-RPC caller (through the ``spdk`` package's ``JSONRPCClient``, see spdk_rpc.py).

- Pool = an lvol store named after the pool, on one base bdev: the device itself, or a
  raid bdev over several (``none`` = concat, ``mirror`` = raid1). Devices are
  ``image:SIZE`` (a sparse file under ``<state_dir>/devices/`` as an AIO bdev),
  ``malloc:SIZE`` (RAM, for trials: lost when deactivated), ``nvme:<PCI address>``
  (``bdev_nvme_attach_controller``), or a block device path (AIO bdev).
- Volume = a thin lvol ``<pool>/<name>``; ``VolumeInfo.path`` is that bdev alias (there is
  no file: export it over NVMe-oF/TCP with :meth:`SpdkNvmfMixin.export_volume_nvmf`).
  Sizes are rounded up to whole MiB and lvol store clusters (1 MiB by default).
- Snapshot = lvol ``<volume>@<snapshot>`` (read-only, instant); clone = a thin lvol over
  it. Deleting a snapshot (or its volume) that a clone depends on is refused (InUse naming
  the clones), as on Ceph: inflating the clone instead would silently make a thin volume
  thick.
- File systems, send/receive, rollback and scrub raise :class:`Unsupported` (see capabilities).
- QoS: :meth:`SpdkDriver.set_volume_qos` (``bdev_set_qos_limit``).

The target is SPDK's ``nvmf_tgt`` (:mod:`.target` starts one; ``strata up`` supervises it).
Tests run the driver on a real nvmf_tgt; ``tests/fakes/spdk_server.py`` remains only for the
faults a real target cannot be made to produce on demand (malformed replies, error codes).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Optional

from plumbing.atomic import write_json_atomic

from ..driver import (
    MEDIA,
    REDUNDANCY_MIN_DEVICES,
    DeviceInfo,
    DeviceSpec,
    Driver,
    PoolInfo,
    SnapshotInfo,
    VolumeInfo,
    recorded_pools,
    validate_bytes,
    validate_kind,
    validate_name,
)
from ..errors import (
    AlreadyExists,
    DataplaneError,
    InsufficientDevices,
    InUse,
    InvalidArgument,
    NotFound,
    Offline,
    Unsupported,
)
from .bdevs import SpdkDevicesMixin
from .nvmf import SpdkNvmfMixin
from .qos import check_qos_limits
from .rbd import SpdkRbdMixin
from .rpc import SpdkRpc

MiB = 1 << 20
REDUNDANCY = {"none": "concat", "mirror": "raid1"}
FS_OFF = "the spdk driver serves block volumes only; put file systems on a local pool"


class SpdkDriver(SpdkDevicesMixin, SpdkNvmfMixin, SpdkRbdMixin, Driver):
    """Pools, thin volumes, snapshots and clones in a running spdk_tgt.

    ``rpc_socket`` is spdk_tgt's RPC unix socket (default ``/var/tmp/spdk.sock``) or an
    IP address with ``rpc_port``; ``cluster_size`` is the lvol store cluster in bytes.
    """

    name = "spdk"

    def __init__(self, state_dir, runner=None, rpc_socket: str = "/var/tmp/spdk.sock",
                 rpc_port: Optional[int] = None, timeout: float = 30.0,
                 cluster_size: int = MiB):
        super().__init__(state_dir, runner)
        self.rpc = SpdkRpc(rpc_socket, rpc_port, timeout)
        self.cluster_size = cluster_size

    # -- capabilities ------------------------------------------------------------------
    def capabilities(self) -> dict:
        """What the spdk driver does, as data."""
        return {
            "driver": self.name, "redundancy": sorted(REDUNDANCY),
            "min_devices": {r: REDUNDANCY_MIN_DEVICES[r] for r in REDUNDANCY},
            "media": list(MEDIA), "quotas": False, "instant_snapshots": True,
            "readonly_snapshots": True, "send_receive": False, "scrub": False,
            "volumes": True, "filesystems": False, "clones": True,
            "clones_depend_on_snapshot": True, "block_devices": True,
            "image_devices": True, "thin_provisioning": True, "qos": True,
            # VolumeInfo.path is an SPDK bdev alias ("pool/volume"), not a file
            "volume_paths": "bdev",
            "exports": ["nvmf"],
            "features_off": {
                "filesystems": FS_OFF,
                "quotas": FS_OFF,
                "send_receive": "SPDK has no incremental snapshot streams; replicate "
                                "volumes from a local pool",
                "scrub": "the SPDK blobstore keeps no checksums; rely on the drives' ECC "
                         "and a mirror pool",
                "rollback": "SPDK lvols cannot be rolled back in place; clone the snapshot "
                            "to a new volume instead",
            },
        }

    # -- records -----------------------------------------------------------------------
    def _record_path(self, pool: str) -> Path:
        return self.pools_dir / f"{pool}.json"

    def _load(self, pool: str) -> dict:
        validate_name(pool, "pool name")
        try:
            rec = json.loads(self._record_path(pool).read_text())
        except FileNotFoundError:
            raise NotFound(f"pool {pool!r} does not exist") from None
        if rec.get("driver", self.name) != self.name:    # the data directory is shared
            raise NotFound(f"pool {pool!r} does not exist in the spdk driver (it belongs to "
                           f"the {rec.get('driver')!r} driver)")
        return rec

    def _save(self, pool: str, rec: dict) -> None:
        write_json_atomic(self._record_path(pool), rec, indent=2, sort_keys=True)

    def list_pools(self) -> list:
        """Names of the pools this driver has records for."""
        return recorded_pools(self.pools_dir, self.name)

    # -- pools -------------------------------------------------------------------------
    def create_pool(self, name, devices, redundancy="none", media="flash") -> PoolInfo:
        """Create base bdevs (and a raid bdev over several), then the lvol store ``name``."""
        validate_name(name, "pool name")
        if redundancy not in REDUNDANCY:
            raise InvalidArgument(f"the spdk driver supports redundancy "
                                  f"{', '.join(sorted(REDUNDANCY))}, not {redundancy!r}")
        if media not in MEDIA:
            raise InvalidArgument(f"invalid media {media!r}: use one of {', '.join(MEDIA)}")
        devices = [d if isinstance(d, DeviceSpec) else DeviceSpec(**d) for d in devices]
        need = REDUNDANCY_MIN_DEVICES[redundancy]
        if len(devices) < need:
            raise InsufficientDevices(f"redundancy {redundancy} needs at least {need} "
                                      f"device(s), got {len(devices)}")
        if self._record_path(name).exists():
            raise AlreadyExists(f"pool {name!r} already exists")
        if self._lvstore(name, missing_ok=True):
            raise AlreadyExists(f"spdk_tgt already has an lvol store named {name!r}")
        in_use = {d["path"] for p in self.list_pools() for d in self._load(p)["devices"]}
        rec = {"name": name, "driver": self.name, "redundancy": redundancy, "media": media,
               "devices": [], "raid": None, "snapshots": {}}
        try:
            for i, dev in enumerate(devices):
                if dev.path in in_use and not dev.path.startswith(("image:", "malloc:")):
                    raise InUse(f"device {dev.path} already belongs to another pool")
                rec["devices"].append(self._attach_device(name, i, dev))
            base = rec["devices"][0]["bdev"]
            if len(rec["devices"]) > 1:
                rec["raid"] = {"name": f"{name}-raid", "level": REDUNDANCY[redundancy]}
                self._create_raid(rec)
                base = rec["raid"]["name"]
            if self._lvstore_on(base):
                raise InUse(f"device {devices[0].path} already holds an SPDK lvol store "
                            "(a pool of another system?)")
            self.rpc.call("bdev_lvol_create_lvstore", bdev_name=base, lvs_name=name,
                          cluster_sz=self.cluster_size, clear_method="unmap")
        except BaseException:
            self._release_devices(rec, delete_images=True)
            raise
        self._save(name, rec)
        return self.pool_info(name)

    def activate_pool(self, name) -> PoolInfo:
        """Re-create the pool's base bdevs after an spdk_tgt restart; SPDK then loads the store."""
        rec = self._load(name)
        for entry in rec["devices"]:
            if not self._bdev(entry["bdev"]):
                if entry["kind"] == "malloc":
                    raise NotFound(f"pool {name!r} lived on a malloc (RAM) bdev and is gone")
                self._create_bdev(entry)
        # the raid bdev assembles itself from its members' superblocks (SPDK examines new
        # bdevs asynchronously); one made before superblocks were written is made again
        if rec.get("raid") and not self._wait_for_bdev(rec["raid"]["name"], 5):
            self._create_raid(rec)
        deadline = time.monotonic() + 10
        while not self._lvstore(name, missing_ok=True):
            if time.monotonic() > deadline:
                raise NotFound(f"spdk_tgt found no lvol store {name!r} on the pool's devices")
            time.sleep(0.1)
        self._save(name, rec)
        return self.pool_info(name)

    def deactivate_pool(self, name) -> None:
        """Remove the base bdevs (SPDK unloads the lvol store, keeping it on the devices)."""
        rec = self._load(name)
        self._refuse_if_exported(name, None)
        self._release_devices(rec, delete_images=False)

    def destroy_pool(self, name) -> None:
        """Delete an empty pool: its lvol store, bdevs, images and record."""
        rec = self._load(name)
        if self._lvstore(name, missing_ok=True):
            lvols = self._lvols(name)
            if lvols:
                raise InUse(f"pool {name!r} still holds volumes or snapshots: "
                            f"{', '.join(sorted(lvols))}; delete them first")
            self.rpc.call("bdev_lvol_delete_lvstore", lvs_name=name)
        self._release_devices(rec, delete_images=True)
        self._record_path(name).unlink(missing_ok=True)

    def pool_info(self, name) -> PoolInfo:
        """Usage from the lvol store's clusters; health offline when the store is not loaded."""
        rec = self._load(name)
        lvs = self._lvstore(name, missing_ok=True)
        devices = []
        for entry in rec["devices"]:
            b = self._bdev(entry["bdev"])
            devices.append(DeviceInfo(
                path=entry["path"] if not entry["path"].startswith("image:") else entry["bdev"],
                backing=entry["backing"], fault_domain=entry["fault_domain"],
                size_bytes=b["num_blocks"] * b["block_size"] if b else 0,
                state="online" if b else "missing"))
        size = used = free = 0
        if lvs:
            size = lvs["total_data_clusters"] * lvs["cluster_size"]
            free = lvs["free_clusters"] * lvs["cluster_size"]
            used = size - free
        health = "offline" if not lvs else (
            "degraded" if any(d.state == "missing" for d in devices) else "online")
        return PoolInfo(name=name, driver=self.name, mountpoint="", redundancy=rec["redundancy"],
                        media=rec["media"], size_bytes=size, used_bytes=used, free_bytes=free,
                        health=health, devices=devices,
                        features_off=self.capabilities()["features_off"])

    def scrub_pool(self, name, progress=None, should_cancel=None, throttle=None):
        """Not available: the SPDK blobstore keeps no checksums to verify."""
        self._load(name)
        raise Unsupported(self.capabilities()["features_off"]["scrub"])

    # -- file systems: not served by this driver ----------------------------------------
    # Creating one is Unsupported; looking one up is NotFound (there are none), so the
    # plane's "does it exist?" paths behave as with any driver.
    def create_filesystem(self, pool, name, quota_bytes=None):
        validate_name(name, "file system name")
        self._load(pool)
        raise Unsupported(FS_OFF)

    def set_filesystem_quota(self, pool, name, quota_bytes):
        validate_name(name, "file system name")
        self._load(pool)
        raise Unsupported(FS_OFF)

    def _no_filesystem(self, pool, name):
        validate_name(name, "file system name")
        self._load(pool)
        raise NotFound(f"pool {pool!r} has no file system {name!r} (the spdk driver serves "
                       "block volumes only)")

    def filesystem_info(self, pool, name):
        self._no_filesystem(pool, name)

    def list_filesystems(self, pool):
        self._load(pool)
        return []

    def delete_filesystem(self, pool, name):
        self._no_filesystem(pool, name)

    # -- lookups -----------------------------------------------------------------------
    def _bdev(self, name: str) -> Optional[dict]:
        try:
            return self.rpc.call("bdev_get_bdevs", name=name)[0]
        except NotFound:
            return None

    def _wait_for_bdev(self, name: str, timeout: float) -> Optional[dict]:
        deadline = time.monotonic() + timeout
        while True:
            b = self._bdev(name)
            if b or time.monotonic() > deadline:
                return b
            time.sleep(0.1)

    def _lvstore(self, pool: str, missing_ok: bool = False) -> Optional[dict]:
        try:
            return self.rpc.call("bdev_lvol_get_lvstores", lvs_name=pool)[0]
        except NotFound:
            if missing_ok:
                return None
            raise Offline(f"pool {pool!r} is not active in spdk_tgt: activate it first") from None

    def _lvstore_on(self, bdev: str) -> bool:
        return any(l["base_bdev"] == bdev for l in self.rpc.call("bdev_lvol_get_lvstores"))

    def _lvols(self, pool: str) -> dict:
        """{lvol name: bdev} of every lvol in the pool's store."""
        lvs = self._lvstore(pool)
        out = {}
        for b in self.rpc.call("bdev_get_bdevs"):
            lv = b.get("driver_specific", {}).get("lvol")
            if lv and lv.get("lvol_store_uuid") == lvs["uuid"]:
                for alias in b.get("aliases", []):
                    if alias.startswith(f"{pool}/"):
                        out[alias[len(pool) + 1:]] = b
        return out

    def _volume_bdev(self, pool: str, name: str) -> dict:
        validate_name(name, "volume name")
        self._load(pool)
        self._lvstore(pool)
        b = self._bdev(f"{pool}/{name}")
        if b is None or b["driver_specific"]["lvol"].get("snapshot"):
            raise NotFound(f"volume {name!r} does not exist in pool {pool!r}")
        return b

    def _volume_info(self, pool: str, name: str, b: dict) -> VolumeInfo:
        lvs = self._lvstore(pool)
        used = b["driver_specific"]["lvol"].get("num_allocated_clusters", 0) * lvs["cluster_size"]
        return VolumeInfo(pool=pool, name=name, path=f"{pool}/{name}",
                          size_bytes=b["num_blocks"] * b["block_size"], used_bytes=used)

    # -- volumes -----------------------------------------------------------------------
    def create_volume(self, pool, name, size_bytes) -> VolumeInfo:
        """Create a thin lvol of ``size_bytes`` (rounded up to whole MiB)."""
        validate_name(name, "volume name")
        validate_bytes(size_bytes, "volume size")
        self._load(pool)
        self._lvstore(pool)
        if self._bdev(f"{pool}/{name}"):
            raise AlreadyExists(f"volume {name!r} already exists in pool {pool!r}")
        self.rpc.call("bdev_lvol_create", lvol_name=name, size_in_mib=math.ceil(size_bytes / MiB),
                      thin_provision=True, lvs_name=pool)
        return self.volume_info(pool, name)

    def resize_volume(self, pool, name, size_bytes) -> VolumeInfo:
        """Grow a volume (an exported namespace grows with it; shrinking is refused)."""
        validate_bytes(size_bytes, "volume size")
        b = self._volume_bdev(pool, name)
        current = b["num_blocks"] * b["block_size"]
        if size_bytes < current:
            raise InvalidArgument(f"volume {name!r} is {current} bytes; shrinking to "
                                  f"{size_bytes} would destroy data and is not supported")
        if size_bytes > current:
            self.rpc.call("bdev_lvol_resize", name=f"{pool}/{name}",
                          size_in_mib=math.ceil(size_bytes / MiB))
        return self.volume_info(pool, name)

    def volume_info(self, pool, name) -> VolumeInfo:
        """A volume's bdev alias, size and allocated bytes."""
        return self._volume_info(pool, name, self._volume_bdev(pool, name))

    def list_volumes(self, pool) -> list:
        """Names of the pool's volumes (snapshots excluded)."""
        self._load(pool)
        return sorted(n for n, b in self._lvols(pool).items()
                      if "@" not in n and not b["driver_specific"]["lvol"].get("snapshot"))

    def delete_volume(self, pool, name) -> None:
        """Delete a volume and its snapshots; refused while it is exported over NVMe-oF or
        while another volume was cloned from one of its snapshots."""
        self._volume_bdev(pool, name)
        self._refuse_if_exported(pool, name)
        snaps = [s.name for s in self.list_snapshots(pool, "volume", name)]
        for snap in snaps:
            clones = self._dependent_clones(pool, name, f"{name}@{snap}")
            if clones:
                raise InUse(f"volume {name!r} cannot be deleted: clone(s) {', '.join(clones)} "
                            f"depend on its snapshot {snap!r}; delete them first")
        self.rpc.call("bdev_lvol_delete", name=f"{pool}/{name}")
        for snap in reversed(snaps):
            self.rpc.call("bdev_lvol_delete", name=f"{pool}/{name}@{snap}")
        rec = self._load(pool)
        for snap in snaps:
            rec["snapshots"].pop(f"{name}@{snap}", None)
        self._save(pool, rec)

    def _dependent_clones(self, pool: str, source: str, snap_lvol: str) -> list:
        """Volumes of other lineages cloned from ``snap_lvol``. SPDK lists a snapshot's
        children: the source volume itself or its next snapshot (its own chain), and each
        clone, or the clone's oldest snapshot (``clone@snap``): named here by volume."""
        b = self._bdev(f"{pool}/{snap_lvol}")
        children = (b or {}).get("driver_specific", {}).get("lvol", {}).get("clones", [])
        return sorted({c.split("@", 1)[0] for c in children} - {source})

    # -- snapshots ---------------------------------------------------------------------
    def _snap_lvol(self, pool, kind, source, name) -> str:
        if validate_kind(kind) == "filesystem":
            validate_name(name, "snapshot name")
            self._no_filesystem(pool, source)
        validate_name(source, "volume name")
        validate_name(name, "snapshot name")
        lvol = f"{source}@{name}"
        if len(lvol) > 63:
            raise InvalidArgument(f"snapshot {name!r} of {source!r}: volume and snapshot "
                                  "names together must be under 63 characters in SPDK")
        return lvol

    def create_snapshot(self, pool, kind, source, name) -> SnapshotInfo:
        """Take an instant read-only snapshot (``bdev_lvol_snapshot``)."""
        lvol = self._snap_lvol(pool, kind, source, name)
        self._volume_bdev(pool, source)
        if self._bdev(f"{pool}/{lvol}"):
            raise AlreadyExists(f"volume {source!r} already has a snapshot {name!r}")
        self.rpc.call("bdev_lvol_snapshot", lvol_name=f"{pool}/{source}", snapshot_name=lvol)
        rec = self._load(pool)
        rec["snapshots"][lvol] = time.time()
        self._save(pool, rec)
        return SnapshotInfo(pool=pool, kind="volume", source=source, name=name,
                            path=f"{pool}/{lvol}", created=rec["snapshots"][lvol])

    def list_snapshots(self, pool, kind, source) -> list:
        """The volume's snapshots, oldest first."""
        self._snap_lvol(pool, kind, source, "x")
        self._volume_bdev(pool, source)
        created = self._load(pool)["snapshots"]
        out = [SnapshotInfo(pool=pool, kind="volume", source=source, name=n.split("@", 1)[1],
                            path=f"{pool}/{n}", created=created.get(n, 0.0))
               for n, b in self._lvols(pool).items()
               if n.startswith(f"{source}@") and b["driver_specific"]["lvol"].get("snapshot")]
        return sorted(out, key=lambda s: (s.created, s.name))

    def delete_snapshot(self, pool, kind, source, name) -> None:
        """Delete a snapshot (its data merges into the volume's chain); refused (InUse)
        while a clone depends on it."""
        lvol = self._snap_lvol(pool, kind, source, name)
        b = self._bdev(f"{pool}/{lvol}")
        if b is None:
            raise NotFound(f"volume {source!r} in pool {pool!r} has no snapshot {name!r}")
        self._refuse_if_exported(pool, lvol)
        clones = self._dependent_clones(pool, source, lvol)
        if clones:
            raise InUse(f"snapshot {name!r} of volume {source!r} has clone(s) "
                        f"{', '.join(clones)} that depend on it; delete them first")
        self.rpc.call("bdev_lvol_delete", name=f"{pool}/{lvol}")
        rec = self._load(pool)
        rec["snapshots"].pop(lvol, None)
        self._save(pool, rec)

    def clone_snapshot(self, pool, kind, source, snapshot, new_name) -> VolumeInfo:
        """A writable thin volume over the snapshot (``bdev_lvol_clone``), instant."""
        lvol = self._snap_lvol(pool, kind, source, snapshot)
        validate_name(new_name, "volume name")
        self._load(pool)
        if self._bdev(f"{pool}/{lvol}") is None:
            raise NotFound(f"volume {source!r} in pool {pool!r} has no snapshot {snapshot!r}")
        if self._bdev(f"{pool}/{new_name}"):
            raise AlreadyExists(f"volume {new_name!r} already exists in pool {pool!r}")
        self.rpc.call("bdev_lvol_clone", snapshot_name=f"{pool}/{lvol}", clone_name=new_name)
        return self.volume_info(pool, new_name)

    def send_snapshot(self, pool, kind, source, snapshot, parent=None, parent_source=None):
        raise Unsupported(self.capabilities()["features_off"]["send_receive"])

    def receive_snapshot(self, pool, kind, target, stream, name):
        raise Unsupported(self.capabilities()["features_off"]["send_receive"])

    def rollback(self, pool, kind, name, snapshot):
        raise Unsupported(self.capabilities()["features_off"]["rollback"])

    def copy_snapshot(self, pool, kind, source, snapshot, target, name):
        raise Unsupported(self.capabilities()["features_off"]["send_receive"])

    # -- QoS -----------------------------------------------------------------------------
    def set_volume_qos(self, pool, name, rw_ios_per_sec=None, rw_mbytes_per_sec=None,
                       r_mbytes_per_sec=None, w_mbytes_per_sec=None) -> dict:
        """Set the volume's rate limits (0 = unlimited, None = unchanged); return them all."""
        self._volume_bdev(pool, name)
        limits = check_qos_limits({"rw_ios_per_sec": rw_ios_per_sec,
                                   "rw_mbytes_per_sec": rw_mbytes_per_sec,
                                   "r_mbytes_per_sec": r_mbytes_per_sec,
                                   "w_mbytes_per_sec": w_mbytes_per_sec})
        if all(v is None for v in limits.values()):
            raise InvalidArgument("give at least one limit")
        try:
            self.rpc.call("bdev_set_qos_limit", name=f"{pool}/{name}", **limits)
        except InvalidArgument as exc:
            # SPDK v26.01 sets a bdev's first limits at any time, but changes them only while
            # the bdev is open (an I/O channel holds the QoS thread); until then it answers
            # EAGAIN for good
            if "temporarily unavailable" not in str(exc):
                raise
            raise InUse(f"SPDK changes the QoS limits of volume {name!r} only while it is "
                        "exported; export it, then change them") from exc
        return self.volume_qos(pool, name)

    def volume_qos(self, pool, name) -> dict:
        """The volume's current rate limits as SPDK reports them."""
        return dict(self._volume_bdev(pool, name).get("assigned_rate_limits", {}))


__all__ = ["SpdkDriver", "DataplaneError"]
