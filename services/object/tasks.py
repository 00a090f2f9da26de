"""Celery tasks of the object service (periodic, from django-celery-beat's schedule)."""
from celery import shared_task

from plane.jobs import job_task, start_job
from plane.models import Job
from services.object import service
from services.object.admin_client import GatewayAdminError


@shared_task(name="object.reconcile_buckets")
def reconcile_buckets():
    """Import buckets made over S3, forget deleted ones, record usage (every 5 minutes)."""
    try:
        return service.reconcile_buckets()
    except service.GatewayUnavailable as exc:
        return {"skipped": exc.message}


@shared_task(name="object.open_gate")
def open_gate():
    """Start the gateway once the pool holding its data is attached (see
    ``bootstrap.open_gate_when_attached``)."""
    from services.object import bootstrap   # the bootstrap's module, only for this task

    return bootstrap.open_gate_when_attached()


@job_task("object.lifecycle_pass", idempotent=True)  # rules, applied again
def lifecycle_pass(ctx):
    """One pass of the buckets' lifecycle rules in the S3 gateway: expirations, aborted
    uploads and transitions to the capacity tier (drawing from the I/O budget's
    ``migration`` class); its counts are the Job's result, the bytes moved its byte count."""
    ctx.progress(5, "the S3 gateway applies every bucket's lifecycle rules")
    stats = service.apply_lifecycle()
    moved = stats.get("transitioned_bytes", 0)
    ctx.progress(100, f"{stats.get('transitioned', 0)} version(s) moved to the capacity tier, "
                 f"{stats.get('expired', 0) + stats.get('versions_removed', 0)} expired",
                 done=moved, total=moved)
    return stats


def start_lifecycle_pass(user=None) -> Job:
    """Queue a lifecycle pass as a Job (one at a time: the gateway serialises passes)."""
    return start_job("lifecycle", lifecycle_pass, user=user, target=("object", "lifecycle"))


@shared_task(name="object.lifecycle")
def lifecycle():
    """Beat's hourly lifecycle pass, as a Job; skipped while one is still queued or running,
    or while the gateway does not answer (the object service is off or starting)."""
    if Job.objects.filter(kind="lifecycle", state__in=["pending", "running"]).exists():
        return {"skipped": "a lifecycle pass is still queued or running"}
    try:
        service.gateway()
        service.admin_client().health()
    except (service.GatewayUnavailable, GatewayAdminError) as exc:
        return {"skipped": str(exc)}
    return {"job": start_lifecycle_pass().pk}
