"""Base bdevs of spdk pools: AIO files and block devices, malloc, NVMe, raid over several."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from ..driver import DeviceSpec, parse_size
from ..errors import InUse, InvalidArgument

PCI_RE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class SpdkDevicesMixin:
    """Create and remove a pool's base bdevs (needs ``self.rpc``, ``self.devices_dir``).

    A device entry in the pool record: ``{"path", "fault_domain", "bdev", "backing",
    "kind": "aio" | "malloc" | "nvme", ...}``.
    """

    def _attach_device(self, pool: str, i: int, dev: DeviceSpec) -> dict:
        bdev = f"{pool}-d{i}"
        # a fixed UUID: a raid bdev's superblock names its members by UUID, and an AIO bdev
        # made again after a restart would otherwise get a new one
        entry = {"path": dev.path, "fault_domain": dev.fault_domain, "bdev": bdev,
                 "backing": None, "kind": "aio", "uuid": str(uuid.uuid4())}
        if dev.path.startswith("image:"):
            size = parse_size(dev.path[len("image:"):])
            self.devices_dir.mkdir(parents=True, exist_ok=True)
            image = self.devices_dir / f"{pool}-{i}.img"
            if image.exists():
                raise InUse(f"image {image} already exists; destroy the old pool first")
            with open(image, "wb") as f:
                f.truncate(size)
            entry["backing"] = str(image)
        elif dev.path.startswith("malloc:"):
            entry.update(kind="malloc", size=parse_size(dev.path[len("malloc:"):]))
        elif dev.path.startswith("nvme:") or PCI_RE.match(dev.path):
            entry.update(kind="nvme", traddr=dev.path.split(":", 1)[1]
                         if dev.path.startswith("nvme:") else dev.path)
        elif dev.path.startswith("/dev/"):
            entry["backing"] = dev.path
        else:
            raise InvalidArgument(f"device {dev.path!r}: use image:SIZE, malloc:SIZE, "
                                  "nvme:<PCI address> or a /dev path")
        self._create_bdev(entry)
        return entry

    def _create_bdev(self, entry: dict) -> None:
        kind = entry["kind"]
        if kind == "aio":
            self.rpc.call("bdev_aio_create", filename=entry["backing"], name=entry["bdev"],
                          block_size=512, uuid=entry.get("uuid"))
        elif kind == "malloc":
            self.rpc.call("bdev_malloc_create", name=entry["bdev"], block_size=512,
                          num_blocks=entry["size"] // 512, uuid=entry.get("uuid"))
        else:
            names = self.rpc.call("bdev_nvme_attach_controller", name=entry["bdev"],
                                  trtype="PCIe", traddr=entry["traddr"])
            entry["bdev"] = names[0] if isinstance(names, list) and names else f"{entry['bdev']}n1"
            entry["controller"] = entry["bdev"][:-2]

    def _delete_bdev(self, entry: dict) -> None:
        method = {"aio": ("bdev_aio_delete", entry["bdev"]),
                  "malloc": ("bdev_malloc_delete", entry["bdev"]),
                  "nvme": ("bdev_nvme_detach_controller", entry.get("controller"))}[entry["kind"]]
        self.rpc.call(method[0], name=method[1])

    def _create_raid(self, rec: dict) -> None:
        level = rec["raid"]["level"]
        # with a superblock on each member: the data starts after it, so that SPDK's lvol
        # module never mistakes a bare member for the pool's lvol store, and the raid bdev
        # assembles itself again when its members come back after a restart
        self.rpc.call("bdev_raid_create", name=rec["raid"]["name"], raid_level=level,
                      base_bdevs=[d["bdev"] for d in rec["devices"]],
                      strip_size_kb=0 if level == "raid1" else 64, superblock=True)

    def _release_devices(self, rec: dict, delete_images: bool) -> None:
        if rec.get("raid") and self._bdev(rec["raid"]["name"]):
            self.rpc.call("bdev_raid_delete", name=rec["raid"]["name"])
        for entry in rec["devices"]:
            if self._bdev(entry["bdev"]):
                self._delete_bdev(entry)
            if delete_images and entry["backing"] and entry["path"].startswith("image:"):
                Path(entry["backing"]).unlink(missing_ok=True)

