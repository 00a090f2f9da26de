"""Celery tasks of data protection. Beat sends ``protection.run_*`` (the tasks at the end,
named as their rows' PeriodicTasks name them) with a row id; each starts a Job (so every
run, scheduled or manual, has a Job row with progress)."""
from celery import shared_task

from plane.jobs import job_task, start_job
from services.protection import backup as backups
from services.protection import bucket_replication as bucket_repl
from services.protection import bucket_snapshots, schedules
from services.protection import failback  # noqa: F401 (registers protection.failback_job)
from services.protection import replication as repl
from services.protection.models import (
    Backup,
    BucketReplication,
    Replication,
    RestorePoint,
    SnapshotSchedule,
)
from services.storage.models import Pool


@job_task("protection.schedule_job")
def schedule_job(ctx, schedule: int):
    """Take a scheduled snapshot and prune by retention."""
    return schedules.take_scheduled_snapshot(SnapshotSchedule.objects.get(pk=schedule),
                                             ctx.progress)


@job_task("protection.replication_job")
def replication_job(ctx, replication: int):
    """Send the next incremental snapshot to the peer."""
    return repl.run_replication(Replication.objects.get(pk=replication), ctx.progress)


@job_task("protection.backup_job")
def backup_job(ctx, backup: int):
    """Back up the next snapshot (full or incremental) to the object store."""
    return backups.run_backup(Backup.objects.get(pk=backup), ctx.progress)


@job_task("protection.restore_job")
def restore_job(ctx, restore_point: int, name: str, pool: str):
    """Restore a restore point as a new file system or volume, verified by digest."""
    rp = RestorePoint.objects.select_related("backup__target").get(pk=restore_point)
    obj, digest = backups.restore(rp, name=name, pool=Pool.objects.get(name=pool),
                                  progress=ctx.progress)
    return {"kind": rp.kind, "name": obj.name, "path": obj.path, "tree_sha256": digest}


@job_task("protection.bucket_replication_job")
def bucket_replication_job(ctx, replication: int):
    """Copy the bucket's versions written since the watermark to the target."""
    return bucket_repl.run_bucket_replication(
        BucketReplication.objects.get(pk=replication), ctx.progress)


@job_task("protection.bucket_restore_job")
def bucket_restore_job(ctx, bucket: str, snapshot: str, target: str):
    """Copy a bucket snapshot's versions into a new bucket."""
    return bucket_snapshots.restore(bucket, snapshot, target, ctx.progress)


def start_schedule_run(schedule: SnapshotSchedule, user=None):
    return start_job("snapshot-schedule", schedule_job, user=user,
                     target=("snapshot-schedule", schedule.name),
                     params={"schedule": schedule.pk})


def start_replication_run(rep: Replication, user=None):
    return start_job("replication", replication_job, user=user,
                     target=("replication", rep.name), params={"replication": rep.pk})


def start_backup_run(backup: Backup, user=None):
    return start_job("backup", backup_job, user=user, target=("backup", backup.name),
                     params={"backup": backup.pk})


def start_restore(rp: RestorePoint, *, name: str, pool: str, user=None):
    return start_job("restore", restore_job, user=user, target=(rp.kind, name),
                     params={"restore_point": rp.pk, "name": name, "pool": pool})


def start_bucket_replication_run(rep: BucketReplication, user=None):
    return start_job("bucket-replication", bucket_replication_job, user=user,
                     target=("bucket-replication", rep.name), params={"replication": rep.pk})


def start_bucket_restore(bucket: str, snapshot: str, target: str, user=None):
    return start_job("bucket-restore", bucket_restore_job, user=user,
                     target=("bucket", target),
                     params={"bucket": bucket, "snapshot": snapshot, "target": target})


# -- what beat sends -----------------------------------------------------------------------

@shared_task(name=schedules.TASK)
def run_schedule(schedule_id: int):
    """Beat: the schedule is due; start its run (a Job) unless it was disabled."""
    schedule = SnapshotSchedule.objects.filter(pk=schedule_id, enabled=True).first()
    if schedule is not None:
        start_schedule_run(schedule)


@shared_task(name=repl.TASK)
def run_replication(replication_id: int):
    """Beat: the replication is due; start its run (a Job) unless it was disabled."""
    rep = Replication.objects.filter(pk=replication_id, enabled=True).first()
    if rep is not None:
        start_replication_run(rep)


@shared_task(name=backups.TASK)
def run_backup(backup_id: int):
    """Beat: the backup is due; start its run (a Job)."""
    backup = Backup.objects.filter(pk=backup_id).first()
    if backup is not None:
        start_backup_run(backup)


@shared_task(name=bucket_repl.TASK)
def run_bucket_replication(replication_id: int):
    """Beat: the bucket replication is due; start its run (a Job) unless it was disabled."""
    rep = BucketReplication.objects.filter(pk=replication_id, enabled=True).first()
    if rep is not None:
        start_bucket_replication_run(rep)
