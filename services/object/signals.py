"""Receivers on the storage app's rows: the file system holding the S3 gateway's cold bytes
(``s3-cold-<pool>``, see ``bootstrap.ensure_cold_filesystem``) cannot be deleted while any
object version's bytes live there (409); once it is empty it can, and the gateway's config
loses its ``cold_root`` (transitions are refused again until another one exists). A change
of the appliance I/O budget rewrites the gateway's config (its ``io_budget`` rates)."""
import os

from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_delete
from django.dispatch import receiver

from console.errors import Conflict
from services.storage.models import FileSystem
from services.tiering.models import IOBudgetSetting


def _cold_files(fs: FileSystem) -> int:
    from services.object.service import DATA_SUBDIR
    root = os.path.join(fs.path, DATA_SUBDIR, "buckets")
    return sum(len(files) for _, _, files in os.walk(root))


@receiver(pre_delete, sender=FileSystem)
def refuse_holding_cold_objects(sender, instance, **kwargs):
    from services.object.service import COLD_PREFIX
    if not instance.name.startswith(COLD_PREFIX) or not instance.path:
        return
    count = _cold_files(instance)
    if count:
        raise Conflict(f"File system {instance.name} holds the cold bytes of {count} S3 object "
                       "versions (lifecycle transitions); delete them or the rules' buckets first.")


@receiver(post_delete, sender=FileSystem)
def drop_cold_root(sender, instance, **kwargs):
    from services.object.service import COLD_PREFIX, write_gateway_config
    if instance.name.startswith(COLD_PREFIX):
        transaction.on_commit(write_gateway_config)


@receiver(post_save, sender=IOBudgetSetting)
def budget_changed(sender, instance, **kwargs):
    from services.object.service import write_gateway_config
    transaction.on_commit(write_gateway_config)
