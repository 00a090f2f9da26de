"""The Celery application of the management plane (broker: Redis)."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("strata")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
