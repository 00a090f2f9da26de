"""Snapshot schedules: the row and its beat entry change together; each run takes
``auto-<schedule>-YYYYmmdd-HHMMSS`` (UTC) and prunes the schedule's older snapshots by its
retention, never one that something depends on. A schedule of a bucket takes and prunes
bucket snapshots instead (``bucket_snapshots.py``)."""

from django.db import transaction
from django.utils import timezone

from services.protection import beat, bucket_snapshots, retention
from services.protection.models import Backup, Replica, Replication, SnapshotSchedule
from services.protection.replication import unique_snapshot_name
from services.protection.retention import Retention
from services.storage import service as storage
from services.storage.models import Snapshot

TASK = "protection.run_schedule"


_scheduled = beat.Scheduled(SnapshotSchedule, "schedule", TASK)
create_schedule = _scheduled.create


def update_schedule(schedule: SnapshotSchedule, **fields) -> SnapshotSchedule:
    """Change the schedule; a new ``cron`` replaces ``every_minutes`` and the other way
    round."""
    if fields.get("cron"):
        fields["every_minutes"] = None
    elif fields.get("every_minutes"):
        fields["cron"] = ""
    return _scheduled.update(schedule, **fields)


def delete_schedule(schedule: SnapshotSchedule) -> None:
    """Delete the schedule and its beat entry; its snapshots stay (delete them by hand)."""
    with transaction.atomic():
        beat.delete_periodic_task(schedule)
        schedule.delete()


def protected_snapshot_names(source) -> dict:
    """Snapshots of ``source`` that must not be pruned: name -> the reason."""
    out = {}
    for snap in source.snapshots.all():
        clones = snap.clones()
        if clones:
            out[snap.name] = "cloned to " + ", ".join(c.name for c in clones)
    field = "filesystem" if source._meta.model_name == "filesystem" else "volume"
    for rep in Replication.objects.filter(**{field: source}).exclude(last_snapshot=""):
        out[rep.last_snapshot] = f"base of replication {rep.name}"
    for backup in Backup.objects.filter(**{field: source}):
        last = backup.restore_points.order_by("-created_at", "-id").first()
        if last is not None:
            out[last.snapshot] = f"base of backup {backup.name}"
    replica = Replica.objects.filter(name=source.name, kind=field).first()
    if replica is not None and replica.last_snapshot:
        out[replica.last_snapshot] = "newest snapshot received from the replication source"
    return out


def _snapshot_name(schedule: SnapshotSchedule, now) -> str:
    return unique_snapshot_name(schedule.source,
                                f"{schedule.snapshot_prefix}{now.strftime('%Y%m%d-%H%M%S')}")


def prune(schedule: SnapshotSchedule) -> list[str]:
    """Delete the schedule's snapshots its retention lets go; return their names."""
    policy = Retention.of(schedule)
    if not policy.keeps_anything():
        return []  # a schedule without retention keeps everything
    source = schedule.source
    mine = {s.pk: s for s in source.snapshots.filter(name__startswith=schedule.snapshot_prefix)}
    protected = protected_snapshot_names(source)
    pruned = retention.prune(f"schedule {schedule.name}",
                             [(pk, s.created_at) for pk, s in mine.items()], policy,
                             lambda pk: storage.delete_snapshot(mine[pk]),
                             protected=[pk for pk, s in mine.items() if s.name in protected],
                             label=lambda pk: str(mine[pk]))
    return [mine[pk].name for pk in pruned]


def take_scheduled_snapshot(schedule: SnapshotSchedule,
                            progress=lambda pct, msg: None) -> dict:
    """Take the schedule's snapshot now and prune; record the outcome on the row."""
    now = timezone.now()
    if schedule.bucket:
        try:
            result = bucket_snapshots.take_scheduled_bucket_snapshot(schedule, now, progress)
        except Exception as exc:
            SnapshotSchedule.objects.filter(pk=schedule.pk).update(
                last_run_at=now, last_error=str(exc))
            raise
        SnapshotSchedule.objects.filter(pk=schedule.pk).update(
            last_run_at=now, last_snapshot=result["snapshot"], last_error="")
        return result
    try:
        progress(10, f"snapshot of {schedule.source.name}")
        snap = storage.create_snapshot(name=_snapshot_name(schedule, now),
                                       **{schedule.kind: schedule.source})
        progress(60, "pruning")
        pruned = prune(schedule)
    except Exception as exc:
        SnapshotSchedule.objects.filter(pk=schedule.pk).update(
            last_run_at=now, last_error=str(exc))
        raise
    SnapshotSchedule.objects.filter(pk=schedule.pk).update(
        last_run_at=now, last_snapshot=snap.name, last_error="")
    return {"snapshot": snap.name, "pruned": pruned,
            "kept": list(Snapshot.objects.filter(
                **{schedule.kind: schedule.source},
                name__startswith=schedule.snapshot_prefix).values_list("name", flat=True))}
