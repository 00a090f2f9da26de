"""Jobs: long operations run by Celery workers and recorded as Job rows with progress.

`start_job` records the row and queues the task once the surrounding transaction commits;
`job_task` wraps a function so that it receives a `JobContext` whose `progress()` writes
the row (at most every STRATA_JOB_PROGRESS_INTERVAL seconds) and raises `JobCancelled`
once someone asked to cancel.

A job that moves bytes passes them too: ``ctx.progress(pct, message, done=n, total=t)``
(``total`` may be an estimate, or None when unknown). The row keeps ``bytes_done`` and
``bytes_total``; the API derives the rate and ETA from them and ``started_at``. When the job
succeeds its last byte count is written, and the total becomes what was moved.

A running job's row gets a heartbeat (``heartbeat_at``, every STRATA_JOB_HEARTBEAT seconds,
from a thread beside the job) so that the sweeper (plane/tasks.py) can tell a job whose
worker died from a slow one. ``job_task(name, idempotent=True)`` marks a task that may run
again from the start after its worker died half-way; the sweeper re-runs those and fails
the others.
"""
import functools
import logging
import threading
import time

from celery import current_app, shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.utils import timezone
from kombu.exceptions import OperationalError

from plane.models import Job
from dataplane.errors import Cancelled
from plumbing.errors import Unavailable

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

    def this_run(self):
        """The job's row while it is still this run's: a run declared dead (no heartbeat) and
        settled, failed as interrupted or queued again (and maybe claimed by a new run, with
        its own start time), no longer owns it."""
        return Job.objects.filter(pk=self.job.pk, started_at=self.job.started_at).exclude(
            state=Job.State.FAILED, message="interrupted")

    def should_cancel(self) -> bool:
        """Someone asked to cancel, or the row is no longer this run's (then stop)."""
        return not self.this_run().filter(cancel_requested=False).exists()

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
        self.this_run().update(**fields)
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
        task=task.name,
    )
    transaction.on_commit(lambda: _queue(job, task))
    return job


def _queue(job: Job, task) -> None:
    """Queue the job's task; when the broker does not answer (Redis restarting), the job is
    recorded as never started and the caller gets a 503 to retry, not a 500 and a job left
    pending for ever."""
    try:
        task.delay(job.pk)
    except OperationalError as exc:
        _finish(job.pk, Job.State.FAILED, message="not started",
                error=f"not started: the job queue did not answer ({exc})")
        raise Unavailable("The job queue (Redis) is not answering, so the job was not "
                          "started; retry in a moment.") from exc


def _finish(job_id: int, state: str, **fields) -> None:
    Job.objects.filter(pk=job_id).update(state=state, finished_at=timezone.now(), **fields)


IDEMPOTENT = set()  # names of the tasks that may run again after a worker died half-way


class _Heartbeat(threading.Thread):
    """Writes ``heartbeat_at`` of a running job every STRATA_JOB_HEARTBEAT seconds until
    stopped; it dies with its worker process, which is the point."""

    def __init__(self, job_id: int):
        super().__init__(name=f"job-{job_id}-heartbeat", daemon=True)
        self.job_id = job_id
        self.stopped = threading.Event()

    def run(self):
        try:
            while not self.stopped.wait(settings.STRATA_JOB_HEARTBEAT):
                try:
                    Job.objects.filter(pk=self.job_id, state=Job.State.RUNNING).update(
                        heartbeat_at=timezone.now())
                except DatabaseError as exc:  # the next beat tries again
                    log.warning("heartbeat of job %s not written: %s", self.job_id, exc)
        finally:
            connections.close_all()  # this thread's own connection

    def stop(self):
        self.stopped.set()
        self.join()


def job_task(name: str, *, idempotent: bool = False):
    """Turn `fn(ctx, **params)` into a Celery task taking a job id. ``idempotent``: running
    it again from the start after a run was cut off anywhere is safe (it states what should
    be, or only reads), so the sweeper re-runs it instead of failing it."""
    if idempotent:
        IDEMPOTENT.add(name)

    def decorate(fn):
        @shared_task(name=name)
        @functools.wraps(fn)
        def run(job_id: int):
            now = timezone.now()
            claimed = Job.objects.filter(pk=job_id, state=Job.State.PENDING).update(
                state=Job.State.RUNNING, started_at=now, heartbeat_at=now, message="running",
                node=settings.STRATA_NODE_NAME)
            if not claimed:  # cancelled before it started, or already ran
                return
            job = Job.objects.get(pk=job_id)
            ctx = JobContext(job)
            heartbeat = _Heartbeat(job_id)
            heartbeat.start()
            # the outcome is written only while the row is this run's (see JobContext.this_run)
            try:
                result = fn(ctx, **job.params)
            except Cancelled as exc:
                ctx.this_run().update(state=Job.State.CANCELLED, finished_at=timezone.now(),
                                      message=str(exc)[:500], **ctx.counts())
            except Exception as exc:  # the job records every failure; nothing is swallowed
                log.exception("job %s (%s) failed", job_id, name)
                ctx.this_run().update(state=Job.State.FAILED, finished_at=timezone.now(),
                                      error=str(exc), message="failed", **ctx.counts())
            else:
                ctx.this_run().update(state=Job.State.SUCCEEDED, finished_at=timezone.now(),
                                      progress=100.0, result=result, message="done",
                                      **ctx.counts(succeeded=True))
            finally:
                heartbeat.stop()

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


def settle_interrupted(job: Job, why: str) -> str | None:
    """A running ``job`` was cut off (``why``: how we know): run its kind's clean-up
    (:func:`on_interrupted`), then queue an idempotent task again from the start ("rerun")
    or record the job as failed ("failed"). None when someone settled it meanwhile.

    A rerun is made claimable only after the clean-up: until then the row stays running
    under a new start time and heartbeat of the settler's own, so no run claims it (a message
    of the dead worker handed out again would otherwise start a run that the clean-up then
    cuts), the dead run no longer owns it (:meth:`JobContext.this_run`), pollers never read a
    final state that is not, and a settler that dies here leaves a heartbeat that goes stale
    for the next sweep."""
    again = job.task in IDEMPOTENT and not job.cancel_requested
    now = timezone.now()
    fields = ({"message": f"interrupted ({why}): cleaning up, then queued again",
               "started_at": now, "heartbeat_at": now}
              if again else
              {"state": Job.State.FAILED, "finished_at": now, "message": "interrupted",
               "error": f"interrupted: {why}; start it again"})
    # only if no one moved it meanwhile (a late heartbeat, another sweep, the worker's reap)
    if not Job.objects.filter(pk=job.pk, state=Job.State.RUNNING,
                              heartbeat_at=job.heartbeat_at).update(**fields):
        return None
    log.warning("job %s (%s): %s; %s", job.pk, job.kind, why,
                "queued again" if again else "marked failed")
    cleanup = _ON_INTERRUPTED.get(job.kind)
    if cleanup is not None:
        try:
            cleanup(**job.params)
        except Exception:
            log.exception("clean-up after interrupted job %s (%s) failed", job.pk, job.kind)
    if not again:
        return "failed"
    if not Job.objects.filter(pk=job.pk, state=Job.State.RUNNING, heartbeat_at=now).update(
            state=Job.State.PENDING, message=f"queued again: {why}", started_at=None,
            heartbeat_at=None, progress=0.0):
        return None   # settled again by a later sweep while the clean-up ran
    requeue(job)
    return "rerun"


def requeue(job: Job) -> None:
    """Queue a message for ``job``'s task again (a no-op run if the job is no longer pending)."""
    current_app.send_task(job.task, args=(job.pk,))


@worker_ready.connect
def fail_interrupted_jobs(**_):
    """A job of this node still `running` when its worker starts was cut off by a crash or
    kill of the previous worker (one worker per node): record it as failed, not running
    forever, and run its kind's clean-up (see :func:`on_interrupted`). Other nodes' jobs
    are the sweeper's (plane/tasks.py), by their heartbeat. An idempotent task is queued
    again instead (see :func:`settle_interrupted`)."""
    for job in Job.objects.filter(state=Job.State.RUNNING,
                                  node__in=[settings.STRATA_NODE_NAME, ""]):
        settle_interrupted(job, "the worker stopped while the job ran")
