"""Keep one django-celery-beat PeriodicTask per schedule, replication or backup row.

Beat reads its schedule from the database (DatabaseScheduler), so creating, changing or
deleting the row here is all it takes for `celery beat` to pick the change up.
"""
import json

from celery.schedules import crontab
from django.db import transaction
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from plumbing.errors import Invalid

CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")


def parse_cron(expr: str) -> dict:
    """Split a 5-field cron expression (``m h dom mon dow``) into crontab fields, checking
    each with Celery's own parser; Invalid (400) with the reason otherwise."""
    parts = expr.split()
    if len(parts) != 5:
        raise Invalid(f"cron: '{expr}' has {len(parts)} fields; use five: minute hour "
                      "day-of-month month day-of-week, e.g. '0 * * * *' for hourly.")
    fields = dict(zip(CRON_FIELDS, parts))
    try:
        crontab(**fields)
    except Exception as exc:
        raise Invalid(f"cron: '{expr}' is not a valid cron expression: {exc}") from None
    return fields


def sync_periodic_task(row, *, kind: str, task: str, cron: str = "",
                       every_minutes=None, enabled: bool = True) -> None:
    """Create or update the PeriodicTask of ``row`` (``kind`` names the row's table) so
    that beat sends ``task(row.pk)`` on ``cron`` or every ``every_minutes``; without
    either, remove it (the row is then run on request only)."""
    if not cron and not every_minutes:
        delete_periodic_task(row)
        return
    crontab_row = interval_row = None
    if cron:
        crontab_row, _ = CrontabSchedule.objects.get_or_create(**parse_cron(cron),
                                                               timezone="UTC")
    else:
        interval_row, _ = IntervalSchedule.objects.get_or_create(
            every=every_minutes, period=IntervalSchedule.MINUTES)
    fields = {"name": f"protection:{kind}:{row.name}", "task": task,
              "args": json.dumps([row.pk]), "crontab": crontab_row,
              "interval": interval_row, "enabled": enabled}
    pt = row.periodic_task
    if pt is None:
        PeriodicTask.objects.filter(name=fields["name"]).delete()  # left over by a crash
        row.periodic_task = PeriodicTask.objects.create(**fields)
        row.save(update_fields=["periodic_task"])
    else:
        for key, value in fields.items():
            setattr(pt, key, value)
        pt.save()


def delete_periodic_task(row) -> None:
    """Remove the row's PeriodicTask, if it has one."""
    if row.periodic_task_id:
        PeriodicTask.objects.filter(pk=row.periodic_task_id).delete()
        row.periodic_task = None
        if row.pk:
            type(row).objects.filter(pk=row.pk).update(periodic_task=None)


class Scheduled:
    """Create and update rows of ``model`` (a schedule, replication or backup: it has
    ``every_minutes``, maybe ``cron`` and ``enabled``) together with their PeriodicTask, in
    one transaction, so that beat sends ``task(row.pk)`` on the row's schedule."""

    def __init__(self, model, kind: str, task: str):
        self.model, self.kind, self.task = model, kind, task

    def sync(self, row) -> None:
        sync_periodic_task(row, kind=self.kind, task=self.task, cron=getattr(row, "cron", ""),
                           every_minutes=row.every_minutes,
                           enabled=getattr(row, "enabled", True))

    def create(self, **fields):
        with transaction.atomic():
            row = self.model.objects.create(**fields)
            self.sync(row)
        return row

    def update(self, row, **fields):
        with transaction.atomic():
            for key, value in fields.items():
                setattr(row, key, value)
            row.save()
            self.sync(row)
        return row
