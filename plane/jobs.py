"""Jobs: long operations run by Celery workers and recorded as Job rows with progress.

`start_job` records the row and queues the task once the surrounding transaction commits;
`job_task` wraps a function so that it receives a `JobContext` whose `progress()` writes
the row (at most every STRATA_JOB_PROGRESS_INTERVAL seconds) and raises `JobCancelled`
once someone asked to cancel.

A job that moves bytes passes them too: ``ctx.progress(pct, message, done=n, total=t)``
(``total`` may be an estimate, or None when unknown). The row keeps ``bytes_done`` and
``bytes_total``; the API derives the rate and ETA from them and ``started_at``. When the job
succeeds its last byte count is written, and the total becomes what was moved.
"""
import functools
import logging
import time

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from plane.models import Job
from dataplane.errors import Cancelled

log = logging.getLogger(__name__)


class JobCancelled(Cancelled):
    """Raised inside a job when a user cancelled it."""


class JobContext:
    """What a running job sees: its row, a progress reporter and a cancel check."""

    def __init__(self, job: Job):
        self.job = job
        self._last_write = 0.0
        self.bytes_done = None  # the last counts reported (written or not)
        self.bytes_total = None

    def should_cancel(self) -> bool:
        return Job.objects.filter(pk=self.job.pk, cancel_requested=True).exists()

    def counts(self, succeeded: bool = False) -> dict:
        """The last byte counts reported, as row fields (a success moved all it counted)."""
        if self.bytes_done is None:
            return {}
        total = self.bytes_done if succeeded else self.bytes_total
        return {"bytes_done": self.bytes_done, "bytes_total": total}

    def progress(self, pct: float, message: str = "", *, done: int | None = None,
                 total: int | None = None) -> None:
        """Report progress (percent, a line of text and, optionally, bytes done of total)."""
        now = time.monotonic()
        pct = max(0.0, min(100.0, float(pct)))
        if done is not None:
            self.bytes_done, self.bytes_total = int(done), None if total is None else int(total)
        fields = {"progress": pct, "message": message[:500], **self.counts()}
        if now - self._last_write < settings.STRATA_JOB_PROGRESS_INTERVAL and pct < 100:
            return
        self._last_write = now
        Job.objects.filter(pk=self.job.pk).update(**fields)
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
                state=Job.State.RUNNING, started_at=timezone.now(), message="running",
                node=settings.STRATA_NODE_NAME)
            if not claimed:  # cancelled before it started, or already ran
                return
            job = Job.objects.get(pk=job_id)
            ctx = JobContext(job)
            try:
                result = fn(ctx, **job.params)
            except Cancelled as exc:
                _finish(job_id, Job.State.CANCELLED, message=str(exc)[:500], **ctx.counts())
            except Exception as exc:  # the job records every failure; nothing is swallowed
                log.exception("job %s (%s) failed", job_id, name)
                _finish(job_id, Job.State.FAILED, error=str(exc), message="failed",
                        **ctx.counts())
            else:
                _finish(job_id, Job.State.SUCCEEDED, progress=100.0, result=result,
                        message="done", **ctx.counts(succeeded=True))

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


_ON_INTERRUPTED = {}  # job kind -> fn(**params): undo what a killed run left going


def on_interrupted(kind: str):
    """Register ``fn(**params)``, called when a worker starts and finds a Job of ``kind``
    that a killed worker left running: to stop what that run started outside the worker
    process (a kernel scrub, ...). Errors are logged, not raised."""
    def register(fn):
        _ON_INTERRUPTED[kind] = fn
        return fn
    return register


@worker_ready.connect
def fail_interrupted_jobs(**_):
    """A job still `running` when a worker starts was cut off by a crash or kill of the
    previous worker (one worker per appliance): record it as failed, not running forever,
    and run its kind's clean-up (see :func:`on_interrupted`)."""
    rows = list(Job.objects.filter(state=Job.State.RUNNING).values_list("pk", "kind", "params"))
    for pk, kind, params in rows:
        if not Job.objects.filter(pk=pk, state=Job.State.RUNNING).update(
                state=Job.State.FAILED, finished_at=timezone.now(), message="interrupted",
                error="interrupted: the worker stopped while the job ran; start it again"):
            continue
        log.warning("marked interrupted job %s (%s) as failed", pk, kind)
        cleanup = _ON_INTERRUPTED.get(kind)
        if cleanup is not None:
            try:
                cleanup(**params)
            except Exception:
                log.exception("clean-up after interrupted job %s (%s) failed", pk, kind)
