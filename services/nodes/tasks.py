import logging
import time

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from plane.broker import redis_client
from plumbing.redisurl import redis_from_url
from services.nodes import cluster

log = logging.getLogger(__name__)

# keys of the broker's Redis (which every process of the plane sees): since when the plane
# has been there to hear heartbeats, its worker (the down detection) and its web server (the
# heartbeats themselves)
WATCHING_KEY = "strata:nodes:watching-since"
HEARING_KEY = "strata:nodes:hearing-since"


@worker_ready.connect
def forget_watching(**_):
    """The plane's worker (re)started: whatever the nodes said while it was away went
    unheard, so its down detection counts from its first run from now on."""
    try:
        redis_client().delete(WATCHING_KEY)
    except Exception as exc:        # the broker not there yet: the key expires on its own
        log.warning("nodes: the down detection's start could not be reset: %s", exc)


def started_hearing() -> None:
    """The web server (re)started (console/asgi.py): heartbeats sent while it was away went
    unheard, so nodes' silence counts from now."""
    try:    # a client of its own with a timeout: a broker that does not answer delays the
        # web server's start by seconds at most
        redis_from_url(settings.CELERY_BROKER_URL, timeout=5.0).set(
            HEARING_KEY, f"{time.time():.3f}", ex=3600)
    except Exception as exc:        # the broker not there yet: the worker's count still holds
        log.warning("nodes: the web server's start could not be recorded: %s", exc)


def watching_for(now: float | None = None) -> float:
    """Seconds the plane has been there to hear the nodes: since the down detection first
    ran after its worker started, or since its web server started if that is later (a web
    server that started over an hour before the last run counts as long ago). The worker's
    key expires an hour after the last run."""
    now = time.time() if now is None else now
    client = redis_client()
    since = client.get(WATCHING_KEY)
    since = float(since) if since else now
    client.set(WATCHING_KEY, f"{since:.3f}", ex=3600)
    hearing = client.get(HEARING_KEY)
    return now - max(since, float(hearing) if hearing else 0.0)


@shared_task(name="nodes.mark_down")
def mark_down() -> list[str]:
    """Nodes whose heartbeats stopped are written down (see cluster.DOWN_AFTER), once the
    plane has been there to hear them for that long: a plane (or its web server alone) back
    from an outage longer than DOWN_AFTER finds every node's last heartbeat old, and would
    otherwise write down (and fence, and fail over) every node of the cluster before their
    agents' next retry."""
    if watching_for() < cluster.DOWN_AFTER:
        return []
    return cluster.mark_down()
