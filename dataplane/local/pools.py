"""Pool lifecycle of the local (btrfs) driver: create, activate, deactivate, destroy, info,
scrub. Mixed into :class:`dataplane.local.driver.LocalDriver`."""

import os
from pathlib import Path

from . import btrfs, loopdev
from .devices import check_block_device, check_not_in_use, image_size, is_image
from .layout import BaseDriver
from .scrub import PacedScrub, stop_orphan
from ..driver import REDUNDANCY_MIN_DEVICES, DeviceInfo, PoolInfo, ScrubResult
from ..mountguard import guard_mountpoint, unguard_mountpoint
from ..errors import (
    CommandFailed,
    DataplaneError,
    InsufficientDevices,
    InUse,
    InvalidArgument,
    Offline,
)

# how many members each redundancy can lose and still mount
TOLERATES_MISSING = {"none": 0, "mirror": 1, "mirror3": 2, "raid10": 1}


class LocalPoolsMixin(BaseDriver):
    """Pools as btrfs file systems over block devices or loop-attached image files."""

    def _pool_root(self, pool: str) -> Path:
        self._load_record(pool)
        mnt = self._mountpoint(pool)
        if not btrfs.is_mounted(mnt):
            raise Offline(f"pool {pool!r} is not active (not mounted): activate it first")
        return mnt

    def _other_pools_devices(self) -> dict:
        result = {}
        for name in self.list_pools():
            try:
                rec = self._load_record(name)
            except DataplaneError:
                continue
            paths = []
            for dev in rec.get("devices", []):
                if dev.get("backing"):
                    paths += loopdev.loops_for(self.runner, Path(dev["backing"]))
                elif dev.get("path"):
                    paths.append(dev["path"])
            result[name] = paths
        return result

    def create_pool(self, name, devices, redundancy="none", media="flash") -> PoolInfo:
        """Make a btrfs pool over ``devices`` and mount it; on failure undo everything."""
        specs = self._check_new_pool(name, devices, redundancy, media)
        need = REDUNDANCY_MIN_DEVICES[redundancy]
        if len(specs) < need:
            raise InsufficientDevices(
                f"redundancy {redundancy!r} needs at least {need} "
                f"device{'s' if need > 1 else ''}; {len(specs)} given")
        plan, seen = [], set()
        for spec in specs:
            if is_image(spec):
                plan.append({"spec": spec.path, "size": image_size(spec), "path": None,
                             "fault_domain": spec.fault_domain})
            else:
                real = check_block_device(spec.path)
                if real in seen:
                    raise InvalidArgument(f"device {spec.path} is listed twice")
                seen.add(real)
                plan.append({"spec": spec.path, "path": spec.path, "backing": None,
                             "fault_domain": spec.fault_domain})
        others = self._other_pools_devices()
        for item in plan:
            if item["path"]:
                check_not_in_use(self.runner, item["path"], others)

        mnt = self._mountpoint(name)
        images, loops, members, mounted, made_fs = [], [], [], False, False
        try:
            for i, item in enumerate(plan):
                if item["path"] is None:
                    image = self.devices_dir / f"{name}.{i}.img"
                    loopdev.create_image(image, item.pop("size"))
                    images.append(image)
                    item["backing"] = str(image)
                    dev = loopdev.attach(self.runner, image)
                    loops.append(dev)
                    members.append(dev)
                else:
                    members.append(item["path"])
            btrfs.mkfs(self.runner, members, redundancy, label=f"strata-{name}")
            made_fs = True
            mnt.mkdir(parents=True)
            guard_mountpoint(self.runner, mnt)
            btrfs.mount(self.runner, members[0], mnt)
            mounted = True
            features_off = {}
            try:
                btrfs.quota_enable(self.runner, mnt)
            except CommandFailed as exc:
                features_off["quotas"] = f"btrfs quota enable failed here: {exc.stderr.strip()}"
            for sub in ("fs", "vol"):
                (mnt / sub).mkdir()
            uuid = btrfs.filesystem_show(self.runner, mnt)["uuid"]
            self._save_record(name, {
                "name": name, "driver": self.name, "redundancy": redundancy, "media": media,
                "uuid": uuid, "features_off": features_off,
                "devices": [{"spec": p["spec"], "path": p["path"], "backing": p["backing"],
                             "fault_domain": p["fault_domain"]} for p in plan],
            })
        except BaseException:
            self._undo_create(mnt, mounted, made_fs, members, loops, images, plan)
            raise
        return self.pool_info(name)

    def _undo_create(self, mnt, mounted, made_fs, members, loops, images, plan):
        if mounted:
            self.runner.run(["umount", str(mnt)], check=False)
        if mnt.is_dir():
            unguard_mountpoint(self.runner, mnt)
            try:
                mnt.rmdir()
            except OSError:
                pass
        for dev in members:
            btrfs.forget(self.runner, dev)
        if made_fs:
            for item in plan:
                if item.get("path"):
                    btrfs.wipe(self.runner, item["path"])
        for dev in loops:
            try:
                loopdev.detach(self.runner, dev)
            except DataplaneError:
                pass
        for image in images:
            try:
                image.unlink()
            except FileNotFoundError:
                pass

    def activate_pool(self, name) -> PoolInfo:
        """Attach image loops, scan and mount the pool (``-o degraded`` if a mirror member
        is missing). Mounting an active pool again is a no-op."""
        rec = self._load_record(name)
        mnt = self._mountpoint(name)
        if btrfs.is_mounted(mnt):
            return self.pool_info(name)
        present, missing, attached = [], [], []
        try:
            for dev in rec["devices"]:
                if dev.get("backing"):
                    if os.path.exists(dev["backing"]):
                        had = loopdev.loops_for(self.runner, Path(dev["backing"]))
                        loop = loopdev.attach(self.runner, Path(dev["backing"]))
                        if not had:
                            attached.append(loop)
                        present.append(loop)
                    else:
                        missing.append(dev["backing"])
                elif dev.get("path") and os.path.exists(dev["path"]):
                    present.append(dev["path"])
                else:
                    missing.append(dev.get("path"))
            allowed = TOLERATES_MISSING[rec["redundancy"]]
            if not present or len(missing) > allowed:
                raise InsufficientDevices(
                    f"pool {name!r} cannot be mounted: device(s) {', '.join(map(str, missing))} "
                    f"missing and redundancy {rec['redundancy']!r} tolerates {allowed}; "
                    "bring the devices back")
            for dev in present:
                btrfs.device_scan(self.runner, dev)
            mnt.mkdir(parents=True, exist_ok=True)
            guard_mountpoint(self.runner, mnt)    # pools made before the guard existed
            btrfs.mount(self.runner, present[0], mnt, degraded=bool(missing))
        except BaseException:
            for loop in attached:
                btrfs.forget(self.runner, loop)
                try:
                    loopdev.detach(self.runner, loop)
                except DataplaneError:
                    pass
            raise
        return self.pool_info(name)

    def deactivate_pool(self, name) -> None:
        """Unmount the pool and detach its image loops (InUse if files are held open)."""
        rec = self._load_record(name)
        mnt = self._mountpoint(name)
        if btrfs.is_mounted(mnt):
            try:
                btrfs.umount(self.runner, mnt)
            except CommandFailed as exc:
                if "busy" in exc.stderr.lower():
                    raise InUse(f"pool {name!r} is busy (files open under {mnt}): stop the "
                                "services using it first") from exc
                raise
        for dev in rec["devices"]:
            if dev.get("backing"):
                for loop in loopdev.loops_for(self.runner, Path(dev["backing"])):
                    btrfs.forget(self.runner, loop)
                    loopdev.detach(self.runner, loop)
            elif dev.get("path"):
                btrfs.forget(self.runner, dev["path"])

    def destroy_pool(self, name) -> None:
        """Delete an empty pool: unmount, detach, delete its images, wipe real devices, drop
        the record. InUse (and nothing changed) if it holds file systems or volumes."""
        rec = self._load_record(name)
        mnt = self._mountpoint(name)
        was_active = btrfs.is_mounted(mnt)
        if not was_active:
            self.activate_pool(name)
        held = [f"file system {n!r}" for n in self._list_names(name, "filesystem")]
        held += [f"volume {n!r}" for n in self._list_names(name, "volume")]
        if held:
            if not was_active:
                self.deactivate_pool(name)
            raise InUse(f"pool {name!r} is not empty: it holds {', '.join(held)}; "
                        "delete them first")
        self.deactivate_pool(name)
        for dev in rec["devices"]:
            if dev.get("backing"):
                try:
                    os.unlink(dev["backing"])
                except FileNotFoundError:
                    pass
            elif dev.get("path") and os.path.exists(dev["path"]):
                btrfs.wipe(self.runner, dev["path"])
        self._record_path(name).unlink()
        unguard_mountpoint(self.runner, mnt)
        try:
            mnt.rmdir()
        except OSError:
            pass

    def pool_attached(self, name) -> bool:
        """Whether the pool's btrfs is mounted at its mountpoint."""
        self._load_record(name)
        return btrfs.is_mounted(self._mountpoint(name))

    def pool_info(self, name) -> PoolInfo:
        """Usage, health ("online", "degraded", "offline") and members of the pool."""
        rec = self._load_record(name)
        mnt = self._mountpoint(name)
        active = btrfs.is_mounted(mnt)
        show = btrfs.filesystem_show(self.runner, mnt) if active else {"devices": [],
                                                                        "missing": False}
        present = {os.path.realpath(d["path"]) for d in show["devices"] if d["path"]}
        sizes = {os.path.realpath(d["path"]): d["size"] for d in show["devices"] if d["path"]}
        errors = btrfs.device_errors(self.runner, mnt) if active else {}
        devices = []
        for dev in rec["devices"]:
            path = None
            if dev.get("backing"):
                loops = loopdev.loops_for(self.runner, Path(dev["backing"]))
                path = loops[0] if loops else None
                online = os.path.exists(dev["backing"]) and (not active or
                                                            (path and os.path.realpath(path)
                                                             in present))
            else:
                path = dev.get("path")
                online = bool(path) and os.path.exists(path) and (
                    not active or os.path.realpath(path) in present)
            real = os.path.realpath(path) if path else None
            size = sizes.get(real) or (loopdev.device_size(path) if path else 0) or (
                loopdev.device_size(dev["backing"]) if dev.get("backing") else 0)
            devices.append(DeviceInfo(
                path=path, backing=dev.get("backing"), fault_domain=dev["fault_domain"],
                size_bytes=size, state="online" if online else "missing",
                errors=sum(v for k, v in errors.items()
                           if path and os.path.realpath(k) == real)))
        if active:
            st = os.statvfs(mnt)
            size = st.f_blocks * st.f_frsize
            free = st.f_bavail * st.f_frsize
            used = size - st.f_bfree * st.f_frsize
            degraded = show["missing"] or any(d.state == "missing" for d in devices)
            health = "degraded" if degraded else "online"
        else:
            size = used = free = 0
            health = "offline"
        return PoolInfo(name=name, driver=self.name, mountpoint=str(mnt),
                        redundancy=rec["redundancy"], media=rec["media"], size_bytes=size,
                        used_bytes=used, free_bytes=free, health=health, devices=devices,
                        features_off=dict(rec.get("features_off", {})))

    def scrub_pool(self, name, progress=None, should_cancel=None, throttle=None,
                   poll_interval: float = 0.5) -> ScrubResult:
        """Run ``btrfs scrub`` at idle I/O priority, calling ``progress(pct, message,
        done=, total=)`` (bytes scrubbed of about the used bytes) as it goes; Cancelled if
        ``should_cancel()`` turns True (the scrub is stopped). ``throttle(nbytes) ->
        seconds`` (with an optional ``throttle.rate()``) paces it: see
        :mod:`dataplane.local.scrub`; ``ScrubResult.pauses`` counts its pauses."""
        return PacedScrub(self.runner, self._pool_root(name), name, progress, should_cancel,
                          throttle, poll_interval).run()

    def stop_scrub(self, name) -> bool:
        return stop_orphan(self.runner, self._pool_root(name))
