"""One run at a time per schedule, replication or backup, across every worker.

A Redis lock (on the Celery broker) with a short expiry that a heartbeat thread renews
while the run is alive: a worker killed mid-run (``kill -9``) stops renewing, so the next
run can start ``STRATA_PROTECTION_LOCK_TTL`` seconds (default 60) later at the latest.
"""
import contextlib
import functools
import logging
import os
import threading

import redis
from django.conf import settings

from console.errors import Conflict

log = logging.getLogger(__name__)


@functools.cache
def _client(url: str) -> redis.Redis:
    if url.startswith("redis+socket://"):  # kombu's spelling of a unix socket (strata up)
        path, _, query = url[len("redis+socket://"):].partition("?")
        db = dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("virtual_host")
        return redis.Redis(unix_socket_path=path, db=int(db or 0))
    return redis.Redis.from_url(url)


def redis_client() -> redis.Redis:
    """The broker's Redis (shared by all workers)."""
    return _client(settings.CELERY_BROKER_URL)


def lock_ttl() -> int:
    return max(2, int(os.environ.get("STRATA_PROTECTION_LOCK_TTL", "60")))


@contextlib.contextmanager
def run_lock(name: str, ttl: int | None = None):
    """Hold ``strata:lock:<name>`` for the duration of the block, or raise Conflict if
    another live run holds it. Yields a no-op kept for callers that report progress."""
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
        yield lambda: None
    finally:
        done.set()
        beat.join()
        try:
            lock.release()
        except redis.exceptions.LockError:
            pass  # expired while we worked: nothing to release
