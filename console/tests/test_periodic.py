"""Each service declares its periodic tasks once (`periodic.py`); beat makes them rows, and
every one names a task the worker knows."""
import pytest
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from plane.celery import app
from plane.discovery import modules_named

pytestmark = pytest.mark.django_db(transaction=True)  # beat closes its connections


def test_every_declared_periodic_task_becomes_a_beat_row_of_a_known_task():
    declared = {name: spec for module in modules_named("periodic")
                for name, spec in module.PERIODIC_TASKS.items()}
    assert {"reconcile-storage", "sample-metrics", "object: lifecycle pass",
            "checkpoints: retention"} <= set(declared)
    app.loader.import_default_modules()  # what a worker does at start: every tasks.py
    DatabaseScheduler(app=app)  # what `celery beat` does at start
    for name, spec in declared.items():
        row = PeriodicTask.objects.get(name=name)
        assert row.task == spec["task"] and row.enabled
        assert row.interval.every == int(spec["schedule"]) and row.interval.period == "seconds"
        assert spec["task"] in app.tasks, f"{name}: no task {spec['task']} in the worker"
