"""Once made a django-celery-beat row; the object service now declares its periodic tasks in
services/object/periodic.py (beat keeps rows of those names up to date). Kept for the history."""
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("object", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = []
