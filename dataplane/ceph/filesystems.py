"""The ceph driver's file systems: the driver's side of :mod:`dataplane.ceph.cephfs`.

A ceph pool gets its CephFS directory the first time a file system is made in it (block-only
pools never touch the CephFS): a RADOS pool ``<pool's RADOS pool>.fs`` placed like the
pool's own (a pool used by RBD cannot hold CephFS data too) becomes a data pool of the
cluster's CephFS and ``/strata/<pool>`` is mounted with ceph-fuse at
``<state_dir>/pools/<pool>``, the pool's mountpoint from then on. The record says so
(``"cephfs": true``) so that activation mounts it again after a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..driver import validate_name
from ..errors import NotFound
from ..mountguard import unguard_mountpoint
from . import clientkeys
from .cephfs import CephFileSystems, mount_state

FS_CAPABILITIES = {
    "filesystems": True, "quotas": True, "dir_pinning": True,
    "filesystem_clones": "copy", "client_keys": True,
}


class CephFilesMixin:
    """File systems, their snapshots, clones and streams for :class:`CephDriver`."""

    def _files(self, rec: dict) -> CephFileSystems:
        key = (rec["ceph_conf"], rec["client"], rec.get("keyring"))
        cache = self.__dict__.setdefault("_files_by_cluster", {})
        files = cache.get(key)
        if files is None:
            files = cache[key] = CephFileSystems(
                rec["ceph_conf"], rec["client"], rec.get("keyring"),
                mount_dir=self._files_mountpoint, capacity=self._files_capacity,
                run_dir=self.state_dir / "run", runner=self.runner)
        return files

    def _files_mountpoint(self, pool: str) -> Path:
        return self.pools_dir / pool

    def _files_capacity(self, pool: str) -> int:
        return self.pool_info(pool).size_bytes

    def _files_data_pool(self, rec: dict) -> str:
        return rec.get("fs_pool") or f"{rec['rados_pool']}.fs"

    def _files_make_data_pool(self, rec: dict) -> str:
        """The RADOS pool for the bytes of the pool's file systems (a pool used by RBD
        cannot also be a CephFS data pool): same CRUSH rule and copies as the pool's, or
        the same erasure-code profile with overwrites on."""
        pool = self._files_data_pool(rec)
        existing = {p["pool_name"] for p in self._mon(rec, "osd pool ls", detail="detail")}
        if pool not in existing:
            if rec.get("ec_profile"):
                self._create_rados_pool(rec, pool, "erasure", profile=rec["ec_profile"])
                self._set(rec, pool, "allow_ec_overwrites", "true")
            else:
                self._create_rados_pool(rec, pool, "replicated", rule=rec["crush_rule"])
                size = self._mon(rec, "osd pool get", pool=rec["rados_pool"], var="size")
                self._set(rec, pool, "size", size["size"])
            if rec.get("min_size"):
                self._set(rec, pool, "min_size", rec["min_size"])
            self._wait_active(rec, [pool])
        return pool

    def _files_ready(self, pool: str) -> tuple:
        """(record, CephFileSystems) of a pool whose CephFS directory exists and is mounted,
        attaching it first when this is its first file system."""
        rec = self._load(pool)
        files = self._files(rec)
        if not rec.get("cephfs"):
            rec["fs_pool"] = self._files_make_data_pool(rec)
            files.attach_pool(pool, rec["fs_pool"])
            rec["cephfs"] = True
            self._save(pool, rec)
        files.mount(pool)
        return rec, files

    def _files_of(self, pool: str) -> Optional[CephFileSystems]:
        """The pool's file systems if it has a CephFS directory (mounted), else None."""
        rec = self._load(pool)
        if not rec.get("cephfs"):
            return None
        files = self._files(rec)
        files.mount(pool)
        return files

    def _files_pool_mountpoint(self, rec: dict) -> str:
        return str(self._files_mountpoint(rec["name"])) if rec.get("cephfs") else ""

    def _files_mount_problem(self, rec: dict) -> Optional[str]:
        """Why the pool's file systems cannot be reached through its mountpoint (None when
        the pool has none, or they can)."""
        if not rec.get("cephfs"):
            return None
        where = self._files_mountpoint(rec["name"])
        state = mount_state(where)
        if state == "dead":
            return (f"the CephFS mount of pool {rec['name']} at {where} is dead (its ceph-fuse "
                    "is gone); it is mounted again by the next attach")
        if state == "absent":
            return (f"the CephFS of pool {rec['name']} is not mounted at {where} (a plain "
                    "directory on another file system)")
        return None

    def _files_activate(self, pool: str) -> None:
        self._files_of(pool)

    def _files_deactivate(self, rec: dict) -> None:
        if rec.get("cephfs"):
            self._files(rec).unmount(rec["name"])

    def _files_destroy(self, rec: dict) -> None:
        """Before the RADOS pools go: InUse while file systems remain, else the pool's
        CephFS directory is removed and its data pool taken off the CephFS."""
        if rec.get("cephfs"):
            files = self._files(rec)
            files.detach_pool(rec["name"], self._files_data_pool(rec))
            mountpoint = self._files_mountpoint(rec["name"])
            if mountpoint.is_dir():
                unguard_mountpoint(self.runner, mountpoint)
                mountpoint.rmdir()
            self._delete_rados_pool(rec, self._files_data_pool(rec))

    # -- file systems --------------------------------------------------------------------
    def create_filesystem(self, pool, name, quota_bytes=None):
        """A directory of the cluster's CephFS, with an optional quota."""
        validate_name(name, "file system name")
        self._load(pool)
        files = self._files_ready(pool)[1]
        info = files.create_filesystem(pool, name, quota_bytes)
        # its own RADOS namespace from the start: native client keys reach only its objects
        clientkeys.ensure_namespace(files, self._fs_root(files, pool, name),
                                    clientkeys.namespace_for(name))
        return info

    def _fs_root(self, files: CephFileSystems, pool: str, name: str) -> str:
        return f"{files.pool_root(pool)}/fs/{name}"

    # -- native clients ------------------------------------------------------------------
    def issue_client_key(self, pool: str, name: str, entity: str,
                         read_only: bool = False) -> clientkeys.ClientKey:
        """A cephx key ``entity`` limited to the file system's directory and its RADOS
        namespace (see :mod:`dataplane.ceph.clientkeys`), with its secret."""
        files = self._need_files(pool, name)
        files.filesystem_info(pool, name)  # NotFound first
        return clientkeys.issue_key(files, self._fs_root(files, pool, name), entity,
                                    clientkeys.namespace_for(name), read_only)

    def revoke_client_key(self, pool: str, entity: str) -> None:
        """Remove key ``entity`` from the cluster and evict the clients using it."""
        rec = self._load(pool)
        clientkeys.revoke_key(self._files(rec), entity)

    def set_filesystem_quota(self, pool, name, quota_bytes):
        """``ceph.quota.max_bytes`` of the file system (None removes it)."""
        self._need_files(pool, name).set_filesystem_quota(pool, name, quota_bytes)

    def filesystem_info(self, pool, name):
        """Path on the pool's mount, quota and recursive bytes."""
        return self._need_files(pool, name).filesystem_info(pool, name)

    def set_filesystem_access(self, pool, name, uid=None, gid=None, mode=None):
        """Owner, group and mode of the file system's root."""
        self._need_files(pool, name).set_filesystem_access(pool, name, uid, gid, mode)

    def list_filesystems(self, pool) -> list:
        """Names of the pool's file systems."""
        files = self._files_of(pool)
        return files.list_filesystems(pool) if files else []

    def delete_filesystem(self, pool, name) -> None:
        """Delete the file system and its snapshots."""
        self._need_files(pool, name).delete_filesystem(pool, name)

    def _need_files(self, pool: str, name: str) -> CephFileSystems:
        validate_name(name, "file system name")
        files = self._files_of(pool)
        if files is None:
            raise NotFound(f"file system {name!r} does not exist in pool {pool!r}")
        return files

    # -- what the snapshot methods of the volumes' mixin hand over for file systems ------
    def fs_create_snapshot(self, pool, source, name):
        return self._need_files(pool, source).create_snapshot(pool, source, name)

    def fs_delete_snapshot(self, pool, source, name):
        return self._need_files(pool, source).delete_snapshot(pool, source, name)

    def fs_list_snapshots(self, pool, source):
        return self._need_files(pool, source).list_snapshots(pool, source)

    def fs_clone_snapshot(self, pool, source, snapshot, new_name):
        return self._need_files(pool, source).clone_snapshot(pool, source, snapshot, new_name)

    def fs_rollback(self, pool, name, snapshot):
        return self._need_files(pool, name).rollback(pool, name, snapshot)

    def fs_changed_since(self, pool, name, snapshot):
        return self._need_files(pool, name).changed_since(pool, name, snapshot)

    def fs_copy_snapshot(self, pool, source, snapshot, target, name):
        return self._need_files(pool, source).copy_snapshot(pool, source, snapshot, target,
                                                            name)

    def fs_send_snapshot(self, pool, source, snapshot, parent, parent_source):
        return self._need_files(pool, source).send_snapshot(pool, source, snapshot, parent,
                                                            parent_source)

    def fs_receive_snapshot(self, pool, target, stream, name):
        validate_name(target, "file system name")
        return self._files_ready(pool)[1].receive_snapshot(pool, target, stream, name)

    def filesystem_source(self, pool: str, name: str) -> dict:
        """Where a file system is in the cluster, for daemons that reach CephFS through
        libcephfs (Ganesha's FSAL_CEPH): ``{conf, client, filesystem, path}``."""
        files = self._need_files(pool, name)
        files.filesystem_info(pool, name)  # NotFound first
        return {"conf": files.conf, "client": files.client,
                "filesystem": files.filesystem_name(),
                "path": self._fs_root(files, pool, name)}

    def pin_directory(self, pool: str, relpath: str, rank: int) -> None:
        """Pin a directory of the pool (``fs/<name>/...``) to MDS ``rank``."""
        self._files_ready(pool)[1].pin(pool, relpath, rank)

    def evict_fs_clients(self, pool: str, entity: str) -> list:
        """Evict the CephFS sessions of cephx ``entity`` (a dead node's daemons) from the
        pool's file system; the client ids."""
        return self._files_ready(pool)[1].evict_clients(entity)

    def mds_ranks(self, pool: str) -> list:
        """The active MDS ranks of the pool's CephFS."""
        return self._files_ready(pool)[1].active_ranks()
