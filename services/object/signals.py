"""Receivers on the storage app's rows: the file system holding the S3 gateway's cold bytes
(``s3-cold-<pool>``, see ``bootstrap.ensure_cold_filesystem``) cannot be deleted while any
object version's bytes live there (409); once it is empty it can, and the gateway's config
loses its ``cold_root`` (transitions are refused again until another one exists). A change
of the appliance I/O budget rewrites the gateway's config (its ``io_budget`` rates).

A pool of media ``capacity`` created, or one whose state moves between usable (online,
degraded) and not (offline, error), re-renders the gateway's config after the commit: the
cold file system is made on the first usable capacity pool if there is none yet, and
``cold_root`` appears or goes with its pool's state. The gateway re-reads its config when
the file changes, so transitions are accepted (or refused) without restarting `strata up`."""
import logging
import os

from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_delete, pre_save
from django.dispatch import receiver

from plane.models import IOBudgetSetting
from plumbing.errors import Conflict
from services.object import bootstrap
from services.object.models import Gateway
from services.object.service import COLD_PREFIX, DATA_SUBDIR, USABLE_POOL_STATES, write_gateway_config
from services.storage.models import FileSystem, Pool

log = logging.getLogger(__name__)


def _cold_files(fs: FileSystem) -> int:
    root = os.path.join(fs.path, DATA_SUBDIR, "buckets")
    return sum(len(files) for _, _, files in os.walk(root))


@receiver(pre_delete, sender=FileSystem)
def refuse_holding_cold_objects(sender, instance, **kwargs):
    if not instance.name.startswith(COLD_PREFIX) or not instance.path:
        return
    count = _cold_files(instance)
    if count:
        raise Conflict(f"File system {instance.name} holds the cold bytes of {count} S3 object "
                       "versions (lifecycle transitions); delete them or the rules' buckets first.")


@receiver(post_delete, sender=FileSystem)
def drop_cold_root(sender, instance, **kwargs):
    if instance.name.startswith(COLD_PREFIX):
        transaction.on_commit(write_gateway_config)


@receiver(post_save, sender=IOBudgetSetting)
def budget_changed(sender, instance, **kwargs):
    transaction.on_commit(write_gateway_config)


@receiver(pre_save, sender=Pool)
def remember_pool_state(sender, instance, **kwargs):
    """The state the row had before this save (None: a new pool), for the receiver below."""
    if instance.media == Pool.Media.CAPACITY:
        instance._state_before_save = (
            Pool.objects.filter(pk=instance.pk).values_list("state", flat=True).first()
            if instance.pk else None)


@receiver(post_save, sender=Pool)
def capacity_pool_changed(sender, instance, created, **kwargs):
    if instance.media != Pool.Media.CAPACITY:
        return
    before = getattr(instance, "_state_before_save", None)
    if not created and before is not None \
            and (before in USABLE_POOL_STATES) == (instance.state in USABLE_POOL_STATES):
        return  # a periodic refresh that changed nothing the gateway sees
    transaction.on_commit(sync_cold_root)


def sync_cold_root() -> None:
    """Make the cold file system if a usable capacity pool has none yet, then re-render the
    gateway's config (only once the object bootstrap made the gateway)."""
    if not Gateway.objects.exists():
        return  # `strata up` has not bootstrapped S3 yet; its bootstrap does this
    try:
        bootstrap.ensure_cold_filesystem()
    except Exception:  # noqa: BLE001 - the pool change stands; S3 keeps serving without a cold tier
        log.exception("object service: could not make the S3 cold file system; lifecycle "
                      "transitions are refused until it exists")
    write_gateway_config()
