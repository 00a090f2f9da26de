"""Which scheduled snapshots a retention policy keeps (pure; no Django, no dataplane).

The policy is the usual grandfather-father-son one: keep the newest ``keep_last``
snapshots, plus the newest snapshot of each of the ``keep_hourly`` most recent hours that
have one, of each of the ``keep_daily`` most recent days, and of each of the
``keep_weekly`` most recent ISO weeks (all in UTC). A snapshot kept by any rule is kept.
"""
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retention:
    """How many snapshots to keep, by rule. All zero keeps nothing (callers refuse that)."""

    keep_last: int = 0
    keep_hourly: int = 0
    keep_daily: int = 0
    keep_weekly: int = 0

    @classmethod
    def of(cls, schedule) -> "Retention":
        """The retention of a snapshot schedule (anything with the four ``keep_*`` fields)."""
        return cls(schedule.keep_last, schedule.keep_hourly, schedule.keep_daily,
                   schedule.keep_weekly)

    def keeps_anything(self) -> bool:
        return any((self.keep_last, self.keep_hourly, self.keep_daily, self.keep_weekly))


def _utc(when: datetime) -> datetime:
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


def _bucket_keys(when: datetime) -> dict:
    when = _utc(when)
    iso = when.isocalendar()
    return {
        "hourly": (when.year, when.month, when.day, when.hour),
        "daily": (when.year, when.month, when.day),
        "weekly": (iso[0], iso[1]),
    }


def snapshots_to_keep(snapshots: Iterable[tuple[Any, datetime]],
                      policy: Retention) -> set:
    """The ids of ``snapshots`` (pairs of an orderable id and creation time) that
    ``policy`` keeps; equal times are ordered by id."""
    ordered = sorted(snapshots, key=lambda s: (_utc(s[1]), s[0]), reverse=True)
    keep = {sid for sid, _ in ordered[: max(policy.keep_last, 0)]}
    for rule, count in (("hourly", policy.keep_hourly), ("daily", policy.keep_daily),
                        ("weekly", policy.keep_weekly)):
        seen = []
        for sid, when in ordered:  # newest first: the first one met in a bucket is its newest
            if len(seen) >= count:
                break
            key = _bucket_keys(when)[rule]
            if key not in seen:
                seen.append(key)
                keep.add(sid)
    return keep


def snapshots_to_prune(snapshots: Iterable[tuple[Any, datetime]], policy: Retention,
                       protected: Iterable[Any] = ()) -> list:
    """The ids ``policy`` lets go, oldest first, never one of ``protected``."""
    snapshots = list(snapshots)
    keep = snapshots_to_keep(snapshots, policy) | set(protected)
    old_first = sorted(snapshots, key=lambda s: (_utc(s[1]), s[0]))
    return [sid for sid, _ in old_first if sid not in keep]


def prune(what: str, snapshots: Iterable[tuple[Any, datetime]], policy: Retention,
          delete: Callable[[Any], None], protected: Iterable[Any] = (),
          label: Callable[[Any], str] = str) -> list:
    """Delete with ``delete(id)``, oldest first, the ``snapshots`` ``policy`` lets go (never
    one of ``protected``); return the ids deleted. One that cannot go is logged (``what``:
    whose snapshots, ``label(id)``: which one) and skipped: it must not stop the others."""
    pruned = []
    for sid in snapshots_to_prune(snapshots, policy, protected=protected):
        try:
            delete(sid)
        except Exception as exc:  # one that cannot go must not stop the others
            log.warning("%s: could not prune %s: %s", what, label(sid), exc)
            continue
        pruned.append(sid)
    return pruned
