"""A schedule, replication or backup deleted along with its source (a cascade, not through
the service functions) takes its beat entry with it."""
from django.db.models.signals import post_delete
from django.dispatch import receiver
from django_celery_beat.models import PeriodicTask

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
