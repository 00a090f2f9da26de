"""Celery tasks of the file service (they run in the worker, a process apart from the web)."""
from plane.jobs import job_task
from services.file import service


@job_task("file.reconcile", idempotent=True)  # it states what should run
def reconcile(ctx):
    """Re-apply every export, share and SMB user to the running daemons, reload them."""
    ctx.progress(0, "applying NFS exports, SMB shares and SMB users")
    summary = service.reconcile_all(force_reload=True)
    ctx.progress(100, "applied")
    return summary
