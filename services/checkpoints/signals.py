"""Receivers on the storage app's rows: a file system holding cold checkpoint copies (see
tierdown.py) cannot be deleted while a version's only copy lives there (409)."""
import os

from django.db.models.signals import pre_delete
from django.dispatch import receiver

from plumbing.errors import Conflict
from services.checkpoints.models import CheckpointVersion
from services.storage.models import FileSystem


@receiver(pre_delete, sender=FileSystem)
def refuse_holding_cold_copies(sender, instance, **kwargs):
    if not instance.path:
        return
    root = os.path.join(instance.path, "")
    held = [str(v) for v in CheckpointVersion.objects.filter(
        cold_path__startswith=root,
        tier__in=[CheckpointVersion.Tier.COLD, CheckpointVersion.Tier.WARMING],
    ).exclude(state__in=[CheckpointVersion.State.DELETING,
                         CheckpointVersion.State.DELETED]).select_related("job")[:10]]
    if held:
        raise Conflict(f"File system {instance.name} holds the cold copies of checkpoint "
                       f"versions {', '.join(held)}; pre-warm them or let retention delete "
                       "them first.")
