"""Periodic bucket reconcile (usage, buckets made or deleted over S3) in django-celery-beat."""
from django.db import migrations

SCHEDULE = [  # (name, task, every seconds)
    ("object: reconcile buckets and usage", "object.reconcile_buckets", 300),
]


def add_schedule(apps, schema_editor):
    Interval = apps.get_model("django_celery_beat", "IntervalSchedule")
    Task = apps.get_model("django_celery_beat", "PeriodicTask")
    for name, task, every in SCHEDULE:
        interval, _ = Interval.objects.get_or_create(every=every, period="seconds")
        Task.objects.get_or_create(name=name, defaults={"task": task, "interval": interval})


def remove_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(
        name__in=[name for name, _, _ in SCHEDULE]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("object", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(add_schedule, remove_schedule)]
