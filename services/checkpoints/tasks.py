"""Celery tasks of the checkpoint service: periodic upkeep and the jobs users start."""
from celery import shared_task

from plane.jobs import job_task
from services.checkpoints import prewarm, retention, scanner, service, tierdown
from services.checkpoints.models import CheckpointJob, CheckpointVersion


@shared_task(name="checkpoints.abort_stale")
def abort_stale():
    """Abort versions left writing past their job's timeout and forget leases that expired
    over a day ago (every minute)."""
    return {"aborted": service.abort_stale(), "leases_forgotten": service.forget_old_leases()}


@shared_task(name="checkpoints.scan_all")
def scan_all():
    """Commit finished DCP/Orbax checkpoints written without the API (every minute)."""
    return scanner.scan_all()


@shared_task(name="checkpoints.retention_all")
def retention_all():
    """Start a retention job for every checkpoint job that has something to delete."""
    started = []
    for job in CheckpointJob.objects.all():
        if retention.plan(job)["delete"]:
            started.append(start_retention(job).pk)
    return {"jobs": started}


def start_retention(job: CheckpointJob, user=None):
    from plane.jobs import start_job

    return start_job("checkpoint-retention", apply_retention, user=user,
                     target=("checkpoint-job", job.name), params={"job": job.name})


@job_task("checkpoints.apply_retention")
def apply_retention(ctx, job: str):
    """Delete a job's superseded, unreferenced versions (with progress)."""
    return retention.apply(CheckpointJob.objects.get(name=job), progress=ctx.progress)


@job_task("checkpoints.prewarm_version")
def prewarm_version(ctx, version: int):
    """Copy a cold version back to the hot pool and verify it (with progress)."""
    return prewarm.warm(CheckpointVersion.objects.get(pk=version), progress=ctx.progress)


@shared_task(name="checkpoints.tier_all")
def tier_all():
    """Start a tier-down job for every superseded version due for its job's capacity pool
    (every minute; see tierdown.py)."""
    return {"jobs": tierdown.start_due()}


@job_task("checkpoints.tier_down_version")
def tier_down_version(ctx, version: int):
    """Copy a superseded version to the capacity pool, verify it, switch, release the hot
    copy (with progress)."""
    return tierdown.move_version(CheckpointVersion.objects.get(pk=version),
                                 progress=ctx.progress)
