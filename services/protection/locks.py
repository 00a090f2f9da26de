"""One run at a time per schedule, replication or backup, across every worker.

A Redis lock (on the Celery broker) with a short expiry that a heartbeat thread renews
while the run is alive: a worker killed mid-run (``kill -9``) stops renewing, so the next
run can start ``STRATA_PROTECTION_LOCK_TTL`` seconds (default 60) later at the latest.
"""
import contextlib
import logging
import os
import threading

import redis
from django.utils import timezone

from plane.broker import redis_client
from plumbing.errors import Conflict

log = logging.getLogger(__name__)


def lock_ttl() -> int:
    return max(2, int(os.environ.get("STRATA_PROTECTION_LOCK_TTL", "60")))


@contextlib.contextmanager
def run_lock(name: str, ttl: int | None = None):
    """Hold ``strata:lock:<name>`` for the duration of the block, or raise Conflict if
    another live run holds it."""
    ttl = ttl or lock_ttl()
    lock = redis_client().lock(f"strata:lock:{name}", timeout=ttl, blocking=False)
    if not lock.acquire(blocking=False):
        raise Conflict(f"{name} is already running; wait for that run to finish "
                       f"(a crashed run's lock expires within {ttl} s).")
    done = threading.Event()

    def heartbeat():
        while not done.wait(ttl / 3):
            try:
                lock.extend(ttl, replace_ttl=True)
            except redis.exceptions.RedisError as exc:
                log.warning("could not renew lock %s: %s", name, exc)

    beat = threading.Thread(target=heartbeat, name=f"lock:{name}", daemon=True)
    beat.start()
    try:
        yield
    finally:
        done.set()
        beat.join()
        try:
            lock.release()
        except redis.exceptions.LockError:
            pass  # expired while we worked: nothing to release


def recorded_run(lock_name: str, row, run, progress, error_prefix: str = ""):
    """``run(row, progress)`` under the run lock ``lock_name``; a failure is recorded on
    ``row`` (state ``error``, its text after ``error_prefix``, ``last_run_at``) and
    raised."""
    with run_lock(lock_name):
        try:
            return run(row, progress)
        except Exception as exc:
            type(row).objects.filter(pk=row.pk).update(
                state="error", error=f"{error_prefix}{exc}", last_run_at=timezone.now())
            raise
