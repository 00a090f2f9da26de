"""Celery tasks of the object service (periodic, from django-celery-beat's schedule)."""
from celery import shared_task

from services.object import service


@shared_task(name="object.reconcile_buckets")
def reconcile_buckets():
    """Import buckets made over S3, forget deleted ones, record usage (every 5 minutes)."""
    try:
        return service.reconcile_buckets()
    except service.GatewayUnavailable as exc:
        return {"skipped": str(exc.detail)}
