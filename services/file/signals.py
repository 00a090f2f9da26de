"""Receivers on the storage app's rows (the storage app is not ours to edit).

- Deleting a file system that is exported or shared is refused with 409: the receiver runs
  inside storage's delete, before the dataplane is touched, and the transaction rolls back.
- A file system's quota is its shares' size: a quota change re-renders smb.conf.
- Snapshots of an exported btrfs file system are bind-mounted read-only and shown under
  ``<pseudo>/.snapshots`` over NFS; deleting one releases it from Ganesha first (409 if busy).
- A file system moved to another pool by tiering (``services.tiering.signals.moved``) keeps
  its NFS pseudo paths and SMB share names: they are re-pointed at its new path.
- The nodes (``services.nodes.public``): a node written down puts the NFS cluster in grace
  for its clients, a node removed leaves the grace database (``services.file.grace``).
"""
import logging
import os

from django.db.models.signals import post_save, pre_delete
from django.dispatch import receiver

from plumbing.errors import Conflict
from services.file import tasks
from services.file.models import NfsExport, SmbShare
from services.file.runtime import CommandError, FileServiceError
from services.file.service import (ApplyFailed, follow_filesystem, nfs_server,
                                   refresh_nfs_snapshots, sync_smb)
from services.nodes.public import Node, node_down, node_drained, node_removed
from services.storage.models import FileSystem, Snapshot
from services.tiering.public import moved

log = logging.getLogger(__name__)


@receiver(pre_delete, sender=FileSystem)
def refuse_exported_filesystem(sender, instance, **kwargs):
    users = [f"NFS export {p}" for p in
             NfsExport.objects.filter(filesystem=instance).values_list("pseudo", flat=True)]
    users += [f"SMB share {n}" for n in
              SmbShare.objects.filter(filesystem=instance).values_list("name", flat=True)]
    if users:
        raise Conflict(f"File system {instance.name} is in use by {', '.join(users)}; "
                       "delete them first.")
    if instance.path:
        server = nfs_server()
        real = os.path.realpath(instance.path)
        mine = [p for p in server.binds() if p == real or p.startswith(real + "/")]
        if mine:
            with server.lock.held():
                server.unbind_unused(set(server.binds()) - set(mine))


@receiver(post_save, sender=FileSystem)
def resize_shares(sender, instance, created, update_fields=None, **kwargs):
    """A share reports its file system's quota as its size: re-render on a quota change.

    Failures are recorded on the share rows (state error) by the sync, not raised here: the
    quota itself is already set.
    """
    if created:
        return
    shares = SmbShare.objects.filter(filesystem=instance, path="")
    if all((s.applied or {}).get("quota_bytes") == instance.quota_bytes for s in shares):
        return
    try:
        sync_smb()
    except ApplyFailed as exc:
        log.warning("file: re-rendering shares after a quota change of %s: %s",
                    instance.name, exc)


def _exported_btrfs(snap) -> bool:
    return bool(snap.filesystem_id and snap.path and snap.filesystem.pool.driver == "local"
                and NfsExport.objects.filter(filesystem_id=snap.filesystem_id, path="").exists())


@receiver(post_save, sender=Snapshot)
def show_snapshot_over_nfs(sender, instance, created, **kwargs):
    """Runs inside storage's create_snapshot after the dataplane made it: never raise here
    (the snapshot exists); a failure is logged and the snapshot stays hidden over NFS."""
    if not _exported_btrfs(instance) or not os.path.isdir(instance.path):
        return
    try:
        refresh_nfs_snapshots(instance.filesystem, bind=instance.path)
    except FileServiceError as exc:
        log.warning("file: snapshot %s is not visible over NFS: %s", instance, exc)


@receiver(pre_delete, sender=Snapshot)
def release_snapshot_from_nfs(sender, instance, **kwargs):
    """Unmount a snapshot's bind before the dataplane deletes it (btrfs refuses a mount)."""
    if not instance.filesystem_id or not instance.path:
        return
    if os.path.realpath(instance.path) not in nfs_server().binds():
        return
    try:
        refresh_nfs_snapshots(instance.filesystem, unbind=instance.path)
    except (CommandError, FileServiceError) as exc:
        raise Conflict(f"Snapshot {instance} is busy over NFS and cannot be deleted now "
                       f"({exc}); retry in a moment.") from exc


@receiver(moved, sender=FileSystem)
def follow_moved_filesystem(sender, instance, old_path, **kwargs):
    """Serve a moved file system's exports and shares from its new path; raising tells the
    move to put it back (see ``services.tiering.moves``)."""
    follow_filesystem(instance, old_path)


@receiver(node_down, sender=Node)
def start_nfs_grace(sender, names, **kwargs):
    tasks.start_grace.delay(list(names))


@receiver(node_removed, sender=Node)
def end_nfs_grace(sender, name, **kwargs):
    tasks.end_grace.delay(name)


@receiver(node_drained, sender=Node)
def release_drained_nfs_grace(sender, name, **kwargs):
    tasks.release_grace.apply_async((name,), countdown=tasks.RETRY_EVERY)
