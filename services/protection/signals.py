"""A schedule, replication or backup deleted along with its source (a cascade, not through
the service functions) takes its beat entry with it; so do the schedules and bucket
replications of a bucket when the bucket is deleted (they name it, no foreign key). A tier
move of a file system or volume that a replication or backup uses is refused (tiering asks
through its ``check_move`` signal and imports nothing of protection)."""
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django_celery_beat.models import PeriodicTask

from plumbing.errors import Conflict
from services.object.public import Bucket
from services.protection.models import (
    Backup,
    BucketReplication,
    Replication,
    SnapshotSchedule,
)
from services.storage.models import FileSystem, Volume
from services.tiering.public import check_move


@receiver(post_delete, sender=SnapshotSchedule)
@receiver(post_delete, sender=Replication)
@receiver(post_delete, sender=Backup)
@receiver(post_delete, sender=BucketReplication)
def drop_periodic_task(sender, instance, **kwargs):
    if instance.periodic_task_id:
        PeriodicTask.objects.filter(pk=instance.periodic_task_id).delete()


@receiver(post_delete, sender=Bucket)
def drop_bucket_protection(sender, instance, **kwargs):
    SnapshotSchedule.objects.filter(bucket=instance.name).delete()
    BucketReplication.objects.filter(bucket=instance.name).delete()


@receiver(check_move, sender=FileSystem)
@receiver(check_move, sender=Volume)
def refuse_move_of_protected(sender, instance, pool, **kwargs):
    """A replication's or backup's snapshots and history live in the object's pool: moving
    it would cut them off."""
    kind = instance._meta.model_name
    users = [f"replication {r}" for r in Replication.objects.filter(**{kind: instance})]
    users += [f"backup {b}" for b in Backup.objects.filter(**{kind: instance})]
    if users:
        raise Conflict(f"{instance.name} is used by {', '.join(users)}; delete those first.")
