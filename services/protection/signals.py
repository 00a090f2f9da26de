"""A schedule, replication or backup deleted along with its source (a cascade, not through
the service functions) takes its beat entry with it; so do the schedules and bucket
replications of a bucket when the bucket is deleted (they name it, no foreign key)."""
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django_celery_beat.models import PeriodicTask

from services.object.models import Bucket
from services.protection.models import (
    Backup,
    BucketReplication,
    Replication,
    SnapshotSchedule,
)


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
