"""Native CephFS access: keys that let a host mount one file system of a ceph pool itself
(kernel client, ceph-fuse), limited to that file system (see dataplane.ceph.clientkeys).

The secret is made by Ceph and handed out once, in the answer that makes the key; the plane
keeps no copy (Ceph has it: ``ceph auth get`` on the cluster shows it to whoever holds the
cluster's admin key, but the plane never does). A lost secret: revoke the key, make another.
"""
from django.db import transaction

from dataplane.ceph.clientkeys import entity_for, mount_commands
from plumbing.errors import Conflict
from services.storage.drivers import driver_for
from services.storage.models import CephClientKey, FileSystem


class NoNativeAccess(Conflict):
    """The file system is not on a ceph pool: hosts reach it through NFS or SMB only."""

    code = "no_native_access"


def _driver_of(fs: FileSystem):
    drv = driver_for(fs.pool.driver)
    if not drv.capabilities().get("client_keys"):
        raise NoNativeAccess(
            f"File system {fs.name} is on pool {fs.pool.name} ({fs.pool.driver} driver): "
            "native CephFS access exists only for file systems on ceph pools; mount it "
            "over NFS or SMB instead.")
    return drv


def create_key(fs: FileSystem, name: str, read_only: bool = False) -> tuple:
    """(row, secret) of a new key ``name`` for ``fs``; the secret is not kept."""
    drv = _driver_of(fs)
    if fs.ceph_keys.filter(name=name).exists():
        raise Conflict(f"File system {fs.name} already has a key named {name}.")
    made = drv.issue_client_key(fs.pool.name, fs.name, entity_for(fs.name, name), read_only)
    try:
        key = CephClientKey.objects.create(
            filesystem=fs, name=name, entity=made.entity, read_only=read_only,
            caps=made.caps, path=made.path, ceph_filesystem=made.filesystem,
            monitors=made.monitors, msgr2_only=made.msgr2_only)
    except BaseException:
        drv.revoke_client_key(fs.pool.name, made.entity)   # no key the plane does not know
        raise
    return key, made.secret


def revoke_key(key: CephClientKey) -> None:
    """Remove the key from Ceph (its clients are evicted), then its row."""
    fs = key.filesystem
    with transaction.atomic():
        key.delete()
        _driver_of(fs).revoke_client_key(fs.pool.name, key.entity)


def revoke_all(fs: FileSystem) -> None:
    """Revoke every key of ``fs`` (before it is deleted)."""
    for key in fs.ceph_keys.all():
        revoke_key(key)


def mount(key: CephClientKey) -> dict:
    """The mount commands of a key (kernel and ceph-fuse), its secret as ``<SECRET>``."""
    return mount_commands({"entity": key.entity, "path": key.path,
                           "filesystem": key.ceph_filesystem, "monitors": key.monitors,
                           "msgr2_only": key.msgr2_only, "read_only": key.read_only})
