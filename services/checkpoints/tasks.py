"""Celery tasks of the checkpoint service: periodic upkeep and the jobs users start.

The Job tasks that move a version between the pools are declared next to the code that
starts them (`prewarm.prewarm_version`, `tierdown.tier_down_version`) and are importable
here too; this module sits on top of the others and nothing of the service imports it."""
from celery import shared_task

from plane.jobs import job_task, start_job
from services.checkpoints import retention, scanner, service, tierdown
from services.checkpoints.models import CheckpointJob
from services.checkpoints.prewarm import prewarm_version
from services.checkpoints.tierdown import tier_down_version

__all__ = ["abort_stale", "apply_retention", "prewarm_version", "retention_all", "scan_all",
           "start_retention", "tier_all", "tier_down_version"]


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
    return start_job("checkpoint-retention", apply_retention, user=user,
                     target=("checkpoint-job", job.name), params={"job": job.name})


@job_task("checkpoints.apply_retention", idempotent=True)  # it recomputes what to delete
def apply_retention(ctx, job: str):
    """Delete a job's superseded, unreferenced versions (with progress)."""
    return retention.apply(CheckpointJob.objects.get(name=job), progress=ctx.progress)


@shared_task(name="checkpoints.tier_all")
def tier_all():
    """Start a tier-down job for every superseded version due for its job's capacity pool
    (every minute; see tierdown.py)."""
    return {"jobs": tierdown.start_due()}
