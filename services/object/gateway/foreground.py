"""Client I/O pre-empts background work: object PUTs and GETs mark foreground traffic in
the appliance's I/O budget (``plumbing.iobudget``, no Django), so tier moves,
backups and replication slow to their foreground share while clients are busy.

The Redis is the config's ``io_budget_redis`` (the plane writes the broker's URL); without
it nothing is marked. The check per request is a clock comparison; the Redis write (at most
once a second per gateway process) runs on the I/O threads, never on the event loop.
"""
from __future__ import annotations

from plumbing.iobudget import ForegroundMarker
from plumbing.redisurl import redis_from_url

_markers: dict[str, ForegroundMarker] = {}


def mark(gw) -> None:
    """Note foreground traffic on gateway ``gw`` (called by the object PUT/GET dispatch)."""
    url = gw.config.get("io_budget_redis")
    if not url:
        return
    marker = _markers.get(url)
    if marker is None:
        marker = _markers[url] = ForegroundMarker(redis_from_url(url, timeout=1.0))
    if marker.due():
        gw.io.submit(marker.write)
