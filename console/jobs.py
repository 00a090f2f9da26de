"""Jobs: long operations run by Celery workers and recorded as Job rows with progress.

`start_job` records the row and queues the task once the surrounding transaction commits;
`job_task` wraps a function so that it receives a `JobContext` whose `progress()` writes
the row (at most every STRATA_JOB_PROGRESS_INTERVAL seconds) and raises `JobCancelled`
once someone asked to cancel.
"""
import functools
import logging
import time

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.models import Job
from dataplane.errors import Cancelled

log = logging.getLogger(__name__)


class JobCancelled(Cancelled):
    """Raised inside a job when a user cancelled it."""


class JobContext:
    """What a running job sees: its row, a progress reporter and a cancel check."""

    def __init__(self, job: Job):
        self.job = job
        self._last_write = 0.0

    def should_cancel(self) -> bool:
        return Job.objects.filter(pk=self.job.pk, cancel_requested=True).exists()

    def progress(self, pct: float, message: str = "") -> None:
        now = time.monotonic()
        pct = max(0.0, min(100.0, float(pct)))
        if now - self._last_write < settings.STRATA_JOB_PROGRESS_INTERVAL and pct < 100:
            return
        self._last_write = now
        Job.objects.filter(pk=self.job.pk).update(progress=pct, message=message[:500])
        if self.should_cancel():
            raise JobCancelled(f"job {self.job.pk} was cancelled")


def start_job(kind: str, task, *, user=None, target=None, params=None) -> Job:
    """Record a pending Job and queue `task(job_id)` when the current transaction commits."""
    target_type, target_name = target or ("", "")
    job = Job.objects.create(
        kind=kind,
        user=user if user is not None and user.is_authenticated else None,
        target_type=target_type,
        target_name=target_name,
        params=params or {},
        message="queued",
    )
    transaction.on_commit(lambda: task.delay(job.pk))
    return job


def _finish(job_id: int, state: str, **fields) -> None:
    Job.objects.filter(pk=job_id).update(state=state, finished_at=timezone.now(), **fields)


def job_task(name: str):
    """Turn `fn(ctx, **params)` into a Celery task taking a job id."""

    def decorate(fn):
        @shared_task(name=name)
        @functools.wraps(fn)
        def run(job_id: int):
            claimed = Job.objects.filter(pk=job_id, state=Job.State.PENDING).update(
                state=Job.State.RUNNING, started_at=timezone.now(), message="running"
            )
            if not claimed:  # cancelled before it started, or already ran
                return
            job = Job.objects.get(pk=job_id)
            ctx = JobContext(job)
            try:
                result = fn(ctx, **job.params)
            except Cancelled as exc:
                _finish(job_id, Job.State.CANCELLED, message=str(exc)[:500])
            except Exception as exc:  # the job records every failure; nothing is swallowed
                log.exception("job %s (%s) failed", job_id, name)
                _finish(job_id, Job.State.FAILED, error=str(exc), message="failed")
            else:
                _finish(job_id, Job.State.SUCCEEDED, progress=100.0, result=result,
                        message="done")

        return run

    return decorate


def cancel_job(job: Job) -> Job:
    """Cancel a pending job at once; ask a running one to stop at its next progress report."""
    if job.finished:
        return job
    if not Job.objects.filter(pk=job.pk, state=Job.State.PENDING).update(
        state=Job.State.CANCELLED, finished_at=timezone.now(), message="cancelled",
        cancel_requested=True,
    ):
        Job.objects.filter(pk=job.pk).update(cancel_requested=True, message="cancelling")
    job.refresh_from_db()
    return job


@worker_ready.connect
def fail_interrupted_jobs(**_):
    """A job still `running` when a worker starts was cut off by a crash or kill of the
    previous worker (one worker per appliance): record it as failed, not running forever."""
    n = Job.objects.filter(state=Job.State.RUNNING).update(
        state=Job.State.FAILED, finished_at=timezone.now(), message="interrupted",
        error="interrupted: the worker stopped while the job ran; start it again")
    if n:
        log.warning("marked %d interrupted job(s) as failed", n)
