import logging
import time

from celery import current_app, shared_task
from celery.signals import worker_ready

from services.nodes import cluster

log = logging.getLogger(__name__)

# the broker's Redis key that says since when the plane has been there to hear heartbeats
WATCHING_KEY = "strata:nodes:watching-since"


def _redis():
    """A connection of the broker's pool (the down detection runs every 5 s)."""
    return current_app.pool.acquire(block=True)


@worker_ready.connect
def forget_watching(**_):
    """The plane's worker (re)started: whatever the nodes said while it was away went
    unheard, so its down detection counts from its first run from now on."""
    try:
        with _redis() as conn:
            conn.default_channel.client.delete(WATCHING_KEY)
    except Exception as exc:        # the broker not there yet: the key expires on its own
        log.warning("nodes: the down detection's start could not be reset: %s", exc)


def watching_for(now: float | None = None) -> float:
    """Seconds since the plane's down detection first ran after its worker started (kept in
    the broker's Redis, which every worker process sees; the key also expires an hour after
    the last run)."""
    now = time.time() if now is None else now
    with _redis() as conn:
        client = conn.default_channel.client
        since = client.get(WATCHING_KEY)
        since = float(since) if since else now
        client.set(WATCHING_KEY, f"{since:.3f}", ex=3600)
    return now - since


@shared_task(name="nodes.mark_down")
def mark_down() -> list[str]:
    """Nodes whose heartbeats stopped are written down (see cluster.DOWN_AFTER), once the
    plane has been there to hear them for that long: a plane back from an outage longer than
    DOWN_AFTER finds every node's last heartbeat old, and would otherwise write down (and
    fence, and fail over) every node of the cluster before their agents' next retry."""
    if watching_for() < cluster.DOWN_AFTER:
        return []
    return cluster.mark_down()
