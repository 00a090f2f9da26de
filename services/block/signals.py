"""Integrity with the storage service, without touching its code.

- Deleting a volume that has block exports is refused (409) before anything is deleted.
- A volume grown (``service.resize_volume`` saves the new ``size_bytes``) makes its LUNs and
  exports show the new size without re-export.
- A volume moved to another pool by tiering (``services.tiering.signals.moved``) keeps its
  exports: each is re-pointed at the new copy with the same connection info; a failure
  makes the move put the volume back. A volume with NVMe-oF exports cannot move (409).
- The nodes (``services.nodes.public``): a node written down has its NVMe-oF paths failed
  over, and one heartbeating again gets them back non-optimized (``services.block.paths``).
"""
from django.db.models.signals import post_save, pre_delete, pre_save
from django.dispatch import receiver

from services.block import paths
from services.block.service import (follow_volume, refuse_volume_delete, refuse_volume_move,
                                    volume_resized)
from services.nodes.public import Node, node_down, node_drained, node_up
from services.storage.models import Volume
from services.tiering.public import check_move, moved


@receiver(pre_delete, sender=Volume)
def refuse_exported_volume_delete(sender, instance, **kwargs):
    refuse_volume_delete(instance)


@receiver(pre_save, sender=Volume)
def remember_old_size(sender, instance, update_fields=None, **kwargs):
    instance._block_old_size = None
    if instance.pk and (update_fields is None or "size_bytes" in update_fields):
        instance._block_old_size = (Volume.objects.filter(pk=instance.pk)
                                    .values_list("size_bytes", flat=True).first())


@receiver(post_save, sender=Volume)
def grow_exports(sender, instance, created, **kwargs):
    old = getattr(instance, "_block_old_size", None)
    if not created and old is not None and instance.size_bytes != old:
        volume_resized(instance)


@receiver(check_move, sender=Volume)
def refuse_exported_volume_move(sender, instance, pool, **kwargs):
    refuse_volume_move(instance, pool)


@receiver(moved, sender=Volume)
def follow_moved_volume(sender, instance, old_path, undo=False, **kwargs):
    """Serve a moved volume's exports from its new path; raising tells the move to put it
    back (see ``services.tiering.moves``)."""
    follow_volume(instance, old_path, undo=undo)


@receiver(node_up, sender=Node)
def heal_paths(sender, name, **kwargs):
    paths.heal(name)


@receiver(node_down, sender=Node)
def fail_over_paths(sender, names, **kwargs):
    paths.fail_over(names)


@receiver(node_drained, sender=Node)
def move_paths_off(sender, name, **kwargs):
    paths.move_off(name)
