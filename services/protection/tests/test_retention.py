"""Retention is a pure function: which scheduled snapshots a policy keeps."""
from datetime import UTC, datetime, timedelta

from services.protection.retention import (
    Retention,
    snapshots_to_keep,
    snapshots_to_prune,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # a Monday


def every(minutes: int, count: int, start=T0):
    """Snapshots taken every ``minutes`` going back from ``start``: (id, time), newest = 0."""
    return [(i, start - timedelta(minutes=minutes * i)) for i in range(count)]


def test_keep_last_keeps_the_newest_n():
    snaps = every(10, 6)
    assert snapshots_to_keep(snaps, Retention(keep_last=2)) == {0, 1}
    assert snapshots_to_prune(snaps, Retention(keep_last=2)) == [5, 4, 3, 2]


def test_hourly_keeps_the_newest_of_each_recent_hour():
    snaps = every(20, 9)  # 12:00, 11:40, 11:20, 11:00, 10:40, ... 09:20
    kept = snapshots_to_keep(snaps, Retention(keep_hourly=3))
    # hours 12, 11 and 10: the newest in each is 12:00, 11:40 and 10:40
    assert kept == {0, 1, 4}


def test_daily_and_weekly_buckets_are_utc_days_and_iso_weeks():
    snaps = every(60 * 12, 30)  # twice a day for 15 days
    daily = snapshots_to_keep(snaps, Retention(keep_daily=3))
    assert sorted(snaps[i][1] for i in daily) == [
        datetime(2026, 11, 28, 12, tzinfo=UTC),
        datetime(2026, 11, 29, 12, tzinfo=UTC),
        datetime(2026, 11, 30, 12, tzinfo=UTC)]
    weekly = snapshots_to_keep(snaps, Retention(keep_weekly=2))
    # Monday 30 Nov is ISO week 49 (its newest: 12:00 today); week 48's newest is Sun 29 12:00
    assert sorted(snaps[i][1] for i in weekly) == [
        datetime(2026, 11, 29, 12, tzinfo=UTC),
        datetime(2026, 11, 30, 12, tzinfo=UTC)]


def test_rules_add_up_and_protected_ones_are_never_pruned():
    snaps = every(60, 30)  # hourly for 30 hours
    policy = Retention(keep_last=2, keep_daily=2)
    kept = snapshots_to_keep(snaps, policy)
    assert kept == {0, 1, 13}  # 12:00, 11:00, and the newest of yesterday (23:00)
    pruned = snapshots_to_prune(snaps, policy, protected={29, 5})
    assert 29 not in pruned and 5 not in pruned and not set(pruned) & kept
    assert len(pruned) == 30 - 3 - 2
    assert pruned == sorted(pruned, reverse=True)  # oldest first


def test_naive_times_are_utc_and_nothing_is_kept_without_rules():
    snaps = [(1, datetime(2026, 1, 1, 10)), (2, datetime(2026, 1, 1, 11))]
    assert snapshots_to_keep(snaps, Retention(keep_hourly=1)) == {2}
    assert not Retention().keeps_anything()
    assert snapshots_to_prune(snaps, Retention()) == [1, 2]
