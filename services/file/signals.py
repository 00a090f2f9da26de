"""Refuse to delete a file system that is exported or shared (the storage app is not ours:
this receiver runs inside its delete, before the dataplane is touched, and rolls it back)."""
import os

from django.db.models.signals import pre_delete
from django.dispatch import receiver

from console.errors import Conflict
from services.file.models import NfsExport, SmbShare
from services.storage.models import FileSystem


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
        from services.file.service import nfs_server

        server = nfs_server()
        real = os.path.realpath(instance.path)
        if real in server.binds():
            with server.lock.held():
                server.unbind_unused({p for p in server.binds() if p != real})
