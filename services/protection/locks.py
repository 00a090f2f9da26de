"""One run at a time per schedule, replication or backup, across every worker.

A Redis lock (on the Celery broker) with an expiry, so that a worker killed mid-run does
not block the next run for longer than ``ttl`` seconds; the holder extends it while it works.
"""
import contextlib
import functools

import redis
from django.conf import settings

from console.errors import Conflict


@functools.lru_cache(maxsize=None)
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def redis_client() -> redis.Redis:
    """The broker's Redis (shared by all workers)."""
    return _client(settings.CELERY_BROKER_URL)


@contextlib.contextmanager
def run_lock(name: str, ttl: int = 300):
    """Hold ``strata:lock:<name>`` or raise Conflict if another run holds it.

    Yields a function that extends the lock by ``ttl``; call it from progress reports."""
    lock = redis_client().lock(f"strata:lock:{name}", timeout=ttl, blocking=False)
    if not lock.acquire(blocking=False):
        raise Conflict(f"{name} is already running; wait for that run to finish.")
    try:
        yield lambda: lock.extend(ttl, replace_ttl=True)
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            pass  # expired while we worked: nothing to release
