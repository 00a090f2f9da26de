"""Celery side of vector index builds: a Job that watches a build running in the web server.

A collection is open in exactly one process (the engine locks its directory), the web
server, so the build itself runs there (`vector.service._run_build`). This job, in the
worker, mirrors the build's progress onto the Job row, turns a cancelled Job into a cancel
request the build polls, and fails the Job if the serving process stops beating.
"""
import time
from datetime import timedelta

from django.utils import timezone

from plane.jobs import JobCancelled, job_task
from vector.models import IndexBuild

POLL = 0.3
STALE = timedelta(seconds=60)     # no heartbeat for this long: the serving process is gone


class BuildFailed(Exception):
    """The index build failed in the serving process; the message says why."""


def _stale(build: IndexBuild) -> bool:
    last = build.heartbeat or build.created_at
    return timezone.now() - last > STALE


@job_task("vector.build_index")
def build_index(ctx, build, collection):
    """Follow build ``build`` of ``collection`` to its end; returns its result."""
    cancelled = False
    while True:
        b = IndexBuild.objects.filter(pk=build).first()
        if b is None:
            raise BuildFailed(f"collection {collection} was deleted during the build")
        if b.state == IndexBuild.State.SUCCEEDED:
            ctx.progress(100, b.message)
            return b.result
        if b.state == IndexBuild.State.CANCELLED:
            raise JobCancelled(b.message or f"build of {collection} was cancelled")
        if b.state == IndexBuild.State.FAILED:
            raise BuildFailed(b.error or "the index build failed")
        if _stale(b):
            IndexBuild.objects.filter(pk=build).update(
                state=IndexBuild.State.FAILED, message="failed",
                error="the web server serving the collection stopped during the build")
            raise BuildFailed(f"the web server serving collection {collection} stopped "
                              "during the build (restarted?); start the build again")
        if not cancelled:
            try:
                ctx.progress(b.progress, b.message)
            except JobCancelled:
                # Ask the build to stop; it answers by moving to "cancelled" (or finishing).
                IndexBuild.objects.filter(pk=build).update(cancel_requested=True)
                cancelled = True
        time.sleep(POLL)
