"""Celery tasks of the file service (they run in the worker, a process apart from the web)."""
import logging

from celery import shared_task

from dataplane.errors import DataplaneError
from plane.jobs import job_task
from services.file import grace, service
from services.file.runtime import FileServiceError

log = logging.getLogger(__name__)


@job_task("file.reconcile", idempotent=True)  # it states what should run
def reconcile(ctx):
    """Re-apply every export, share and SMB user to the running daemons, reload them."""
    ctx.progress(0, "applying NFS exports, SMB shares and SMB users")
    summary = service.reconcile_all(force_reload=True)
    ctx.progress(100, "applied")
    return summary


RETRY_EVERY = 5.0       # seconds: the nodes' periodic down check runs as often
RETRIES = 120           # ten minutes of a Ceph cluster that does not answer


@shared_task(name="file.start_grace", bind=True, max_retries=RETRIES)
def start_grace(self, names: list) -> list:
    """Nodes written down: the NFS grace for their clients (see services.file.grace)."""
    try:
        dead = grace.start_grace(names)
    except (FileServiceError, DataplaneError) as exc:
        log.error("file: NFS grace for node(s) %s not started (%s); retrying in %.0f s",
                  ", ".join(names), exc, RETRY_EVERY)
        raise self.retry(countdown=RETRY_EVERY) from exc
    for name in dead:
        release_grace.delay(name)
    return dead


@shared_task(name="file.end_grace", bind=True, max_retries=RETRIES)
def end_grace(self, name: str) -> bool:
    """A node removed: its NFS grace membership ends (see services.file.grace)."""
    try:
        return grace.end_grace(name)
    except (FileServiceError, DataplaneError) as exc:
        log.error("file: NFS grace membership of node %s not ended (%s); retrying in %.0f s",
                  name, exc, RETRY_EVERY)
        raise self.retry(countdown=RETRY_EVERY) from exc


@shared_task(name="file.release_grace", bind=True, max_retries=RETRIES)
def release_grace(self, name: str) -> bool:
    """A node down (fenced) or drained: its need of grace is given up, for a drained one once
    its Ganesha stopped (see services.file.grace)."""
    if not grace.release_ready(name):             # a drained node's Ganesha still runs
        raise self.retry(countdown=RETRY_EVERY)
    try:
        return grace.release(name)
    except (FileServiceError, DataplaneError) as exc:
        log.error("file: NFS grace of node %s not lifted (%s); retrying in %.0f s",
                  name, exc, RETRY_EVERY)
        raise self.retry(countdown=RETRY_EVERY) from exc


@shared_task(name="file.release_stale_grace")
def release_stale_grace() -> list:
    """Needs of grace of nodes long down or drained that nothing else gives up (see
    services.file.grace.release_stale); the next run tries again when Ceph does not answer."""
    try:
        return grace.release_stale()
    except (FileServiceError, DataplaneError) as exc:
        log.error("file: stale NFS grace needs not checked (%s)", exc)
        return []
