"""Periodic upkeep of the checkpoint service, kept in django-celery-beat's schedule."""
from django.db import migrations

SCHEDULE = [  # (name, task, every seconds)
    ("checkpoints: abort stale versions", "checkpoints.abort_stale", 60),
    ("checkpoints: commit DCP/Orbax checkpoints found on disk", "checkpoints.scan_all", 30),
    ("checkpoints: retention", "checkpoints.retention_all", 600),
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
        ("checkpoints", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(add_schedule, remove_schedule)]
