"""The appliance's I/O budget for background work: `plumbing.iobudget`'s token buckets,
configured from the database (re-read every few seconds) on the broker's Redis, so every
worker shares the same buckets. The share background keeps while foreground work is busy is
tied to the classes of work's shares (``plumbing.workclass.background_fraction``: with the
default shares 50/(50+1000), under 5%); the budget's own ``foreground_share`` is a cap on it."""
import time

from django.conf import settings

from plane.broker import redis_client
from plane.models import IOBudgetSetting
from plumbing.iobudget import BudgetConfig, ForegroundMarker, IOBudget, Pacer
from plumbing.workclass import background_fraction, read_shares

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
            foreground_share=min(row.foreground_share,
                                 background_fraction(read_shares(settings.DATA_DIR))))
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
