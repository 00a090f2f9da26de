"""The periodic tier-down of superseded versions, in django-celery-beat's schedule."""
from django.db import migrations

NAME = "checkpoints: tier superseded versions down to the capacity pool"


def add_schedule(apps, schema_editor):
    Interval = apps.get_model("django_celery_beat", "IntervalSchedule")
    Task = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = Interval.objects.get_or_create(every=60, period="seconds")
    Task.objects.get_or_create(name=NAME, defaults={"task": "checkpoints.tier_all",
                                                    "interval": interval})


def remove_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("checkpoints", "0003_version_location"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(add_schedule, remove_schedule)]
