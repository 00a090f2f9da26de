"""Celery tasks of the storage service."""
import logging

from celery import shared_task

from plane import iobudget
from plane.jobs import job_task, on_interrupted
from services.storage import service
from services.storage.drivers import driver_for
from services.storage.metrics import sample_metrics  # noqa: F401  (the worker finds tasks in tasks.py)
from services.storage.models import Pool

log = logging.getLogger(__name__)


@on_interrupted("scrub")
def stop_orphan_scrub(pool: str):
    """A killed worker's scrub goes on in the kernel, unpaced: stop it."""
    row = Pool.objects.filter(name=pool).first()
    if row is not None and driver_for(row.driver).stop_scrub(pool):
        log.warning("stopped the scrub of pool %s left running by a killed worker", pool)


@job_task("storage.scrub_pool", idempotent=True)  # it only reads and repairs
def scrub_pool(ctx, pool: str):
    """Read and verify every block of a pool; repair from redundancy where it can. The
    bytes read are drawn from the shared background I/O budget (class ``scrub``): the
    scrub goes at the budget's rate, and pauses while the budget makes it wait or
    foreground traffic is on (a scrub the kernel held to 10 or 1 MiB/s still slowed an
    fsync-heavy writer by about a fifth here; bench/protection.py measures the writer beside
    a paced and an unpaced scrub)."""
    row = Pool.objects.get(name=pool)
    ctx.progress(0, f"scrubbing {pool}")
    result = driver_for(row.driver).scrub_pool(
        pool, progress=ctx.progress, should_cancel=ctx.should_cancel,
        throttle=iobudget.pacer("scrub", yield_to_foreground=True))
    return {"bytes_scrubbed": result.bytes_scrubbed,
            "errors_corrected": result.errors_corrected,
            "errors_uncorrectable": result.errors_uncorrectable,
            "pauses": result.pauses}


@shared_task(name="storage.reconcile_all")
def reconcile_all():
    return service.reconcile_all()


@shared_task(name="storage.attach_pools")
def attach_pools():
    return service.attach_pools()
