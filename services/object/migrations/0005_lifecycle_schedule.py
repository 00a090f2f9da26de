"""The hourly lifecycle pass (a Job that has the S3 gateway apply every bucket's rules) in
django-celery-beat."""
from django.db import migrations

NAME, TASK, EVERY = "object: lifecycle pass", "object.lifecycle", 3600


def add_schedule(apps, schema_editor):
    Interval = apps.get_model("django_celery_beat", "IntervalSchedule")
    Task = apps.get_model("django_celery_beat", "PeriodicTask")
    interval, _ = Interval.objects.get_or_create(every=EVERY, period="seconds")
    Task.objects.get_or_create(name=NAME, defaults={"task": TASK, "interval": interval})


def remove_schedule(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("object", "0004_plane_key"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(add_schedule, remove_schedule)]
