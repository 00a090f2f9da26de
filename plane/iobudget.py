"""The appliance's I/O budget for background work: `plumbing.iobudget`'s token buckets,
configured from the database (re-read every few seconds) on the broker's Redis, so every
worker shares the same buckets."""
import time

from plane.broker import redis_client
from plane.models import IOBudgetSetting
from plumbing.iobudget import BudgetConfig, ForegroundMarker, IOBudget, Pacer

MiB = 1 << 20
_CACHE = {"at": 0.0, "budget": None, "marker": None}
REFRESH = 5.0


def budget() -> IOBudget:
    """The shared budget with its current configuration."""
    if _CACHE["budget"] is None or time.monotonic() - _CACHE["at"] > REFRESH:
        row = IOBudgetSetting.get()
        config = BudgetConfig(
            rate=row.rate_mbps * MiB, burst=row.burst_mb * MiB,
            classes={k: int(v) * MiB for k, v in (row.class_rates_mbps or {}).items()},
            foreground_share=row.foreground_share)
        _CACHE.update(at=time.monotonic(), budget=IOBudget(redis_client(), config))
    return _CACHE["budget"]


def forget_cached() -> None:
    """Use the database's settings on the next call (after a change)."""
    _CACHE["budget"] = _CACHE["marker"] = None


def throttle(stream, job_class: str):
    """``stream`` drawn from the shared budget under ``job_class``; closing this closes
    ``stream`` (so a `btrfs send` behind it stops at once)."""
    try:
        for chunk in stream:
            budget().take(len(chunk), job_class)
            yield chunk
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()


def pacer(job_class: str, yield_to_foreground: bool = False) -> Pacer:
    """A pacer on the shared budget for work that reports bytes after using them and
    pauses when told to (a scrub: ``pacer("scrub", yield_to_foreground=True)`` is the
    driver's ``throttle``)."""
    return Pacer(budget, job_class, yield_to_foreground)


def foreground() -> None:
    """Called by foreground paths (the checkpoint API's begin, commit and lease) to pre-empt
    background work; cheap enough for every request (one Redis write a second at most)."""
    if _CACHE["marker"] is None:
        _CACHE["marker"] = ForegroundMarker(redis_client())
    _CACHE["marker"]()
