"""The sweeper of stale jobs (Celery beat's ``plane.sweep_jobs``, every
STRATA_JOB_SWEEP_INTERVAL seconds; the times are in console/settings.py and plane/README.md).

- A `running` job whose heartbeat (plane/jobs.py) is older than STRATA_JOB_STALE_RUNNING
  was cut off: its worker process died (kill -9, OOM, a node lost). Its kind's clean-up runs
  (``on_interrupted``); an idempotent task is then queued again from the start (pending only
  after the clean-up, see ``settle_interrupted``), any other job is recorded as failed, saying
  why.
- A `pending` job older than STRATA_JOB_STALE_PENDING whose task message is in none of the
  broker's queues nor held unacknowledged by a worker lost its message (Redis restarted
  without it, a queue flushed): it is queued again. That is safe for every task: a pending job
  never started (a run begins by claiming the row from `pending`), and should the message turn
  up after all, the second run finds the row claimed and does nothing.
"""
import base64
import json
import logging
from datetime import timedelta

from celery import current_app, shared_task
from django.conf import settings
from django.utils import timezone

from plane.jobs import requeue, settle_interrupted
from plane.models import Job

log = logging.getLogger(__name__)


def queued_job_ids() -> set[int]:
    """Job ids of the job-task messages in the broker: waiting in a queue (every priority) or
    delivered to a worker and not yet acknowledged (tasks are acknowledged once done)."""
    with current_app.connection_for_read() as conn:
        channel = conn.default_channel
        client = channel.client
        raw = []
        for queue in current_app.amqp.queues:
            for pri in channel.priority_steps:
                key = f"{queue}{channel.sep}{pri}" if pri else queue
                raw += client.lrange(key, 0, -1)
        raw += [json.loads(v)[0] for v in client.hvals(channel.unacked_key)]
    ids = set()
    for message in raw:
        if isinstance(message, (bytes, str)):
            message = json.loads(message)
        task = message.get("headers", {}).get("task", "")
        if not task:
            continue
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        if len(args) == 1 and isinstance(args[0], int):
            ids.add(args[0])
    return ids


def sweep_running(now) -> dict:
    """Re-run or fail the running jobs whose heartbeat stopped."""
    stale = now - timedelta(seconds=settings.STRATA_JOB_STALE_RUNNING)
    done = {"rerun": [], "failed": []}
    for job in Job.objects.filter(state=Job.State.RUNNING, heartbeat_at__lt=stale):
        silent = (now - job.heartbeat_at).total_seconds()
        node = f" on node {job.node}" if job.node else ""
        outcome = settle_interrupted(
            job, f"its worker stopped while it ran (no heartbeat for {silent:.0f} s{node})")
        if outcome:
            done[outcome].append(job.pk)
    return done


def sweep_pending(now) -> dict:
    """Queue again the pending jobs whose message is gone."""
    old = list(Job.objects.filter(
        state=Job.State.PENDING,
        created_at__lt=now - timedelta(seconds=settings.STRATA_JOB_STALE_PENDING)))
    if not old:
        return {"requeued": [], "failed": []}
    queued = queued_job_ids()
    requeued, failed = [], []
    for job in old:
        if job.pk in queued:
            continue
        if not job.task:  # made before jobs recorded their task: nothing to queue
            if Job.objects.filter(pk=job.pk, state=Job.State.PENDING).update(
                    state=Job.State.FAILED, finished_at=now, message="not started",
                    error="not started: its queue message was lost; start it again"):
                failed.append(job.pk)
            continue
        Job.objects.filter(pk=job.pk, state=Job.State.PENDING).update(
            message="queued again: its queue message was lost")
        log.warning("job %s (%s): its queue message was lost; queued again", job.pk, job.kind)
        requeue(job)
        requeued.append(job.pk)
    return {"requeued": requeued, "failed": failed}


@shared_task(name="plane.sweep_jobs")
def sweep_jobs() -> dict:
    now = timezone.now()
    return {"running": sweep_running(now), "pending": sweep_pending(now)}
