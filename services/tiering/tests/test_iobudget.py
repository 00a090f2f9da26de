"""The shared I/O budget on the real Redis, with explicit clock values (no sleeping): rates,
bursts, per-class caps, all-or-nothing takes across buckets, and foreground pre-emption; the
pacer that charges bytes already read (a scrub) and answers how long to pause."""
import pytest
from django.conf import settings

from plumbing.iobudget import FOREGROUND_WAIT, PREFIX, BudgetConfig, IOBudget, Pacer

MiB = 1 << 20


@pytest.fixture
def redis_db():
    import redis
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    for key in client.scan_iter(PREFIX + "*"):
        client.delete(key)
    yield client
    for key in client.scan_iter(PREFIX + "*"):
        client.delete(key)


def test_rate_and_burst(redis_db):
    b = IOBudget(redis_db, BudgetConfig(rate=10 * MiB, burst=10 * MiB))
    assert b.try_take(10 * MiB, "backup", now=100.0) == 0  # a full bucket allows the burst
    assert b.try_take(5 * MiB, "backup", now=100.0) == pytest.approx(0.5)
    assert b.try_take(5 * MiB, "backup", now=100.25) == pytest.approx(0.25)
    assert b.try_take(5 * MiB, "backup", now=100.5) == 0  # refilled at 10 MiB/s
    assert b.try_take(1, "backup", now=100.5) > 0


def test_class_cap_and_all_or_nothing(redis_db):
    b = IOBudget(redis_db, BudgetConfig(rate=100 * MiB, burst=4 * MiB,
                                        classes={"migration": 1 * MiB}))
    assert b.try_take(1 * MiB, "migration", now=0.0) == 0  # class bucket starts at 1 MiB
    wait = b.try_take(2 * MiB, "migration", now=0.0)
    assert wait == pytest.approx(2.0)  # the class cap, not the appliance rate, decides
    # the refused take left the appliance bucket alone: 3 MiB remain for other classes
    assert b.try_take(3 * MiB, "backup", now=0.0) == 0
    assert b.try_take(1, "backup", now=0.0) > 0


def test_foreground_pre_empts_background(redis_db):
    b = IOBudget(redis_db, BudgetConfig(rate=10 * MiB, burst=10 * MiB,
                                        foreground_share=0.1))
    assert b.try_take(10 * MiB, "replication", now=0.0) == 0
    assert b.try_take(1 * MiB, "replication", now=0.0) == pytest.approx(0.1)
    b.foreground(hold_ms=5000)
    assert b.foreground_active()
    assert b.try_take(1 * MiB, "replication", now=0.0) == pytest.approx(1.0)  # 10x slower


@pytest.mark.django_db
def test_unlimited_when_no_rate_and_throttle_closes_its_source(redis_db):
    b = IOBudget(redis_db, BudgetConfig())
    assert b.try_take(1 << 40, "scrub") == 0
    closed = []

    def source():
        try:
            yield b"a" * 10
            yield b"b" * 10
        finally:
            closed.append(True)
    from plane.iobudget import forget_cached, throttle
    forget_cached()
    gen = throttle(source(), "backup")
    assert next(gen) == b"a" * 10
    gen.close()
    assert closed == [True]


def test_pacer_owes_what_was_read_and_says_how_long_to_pause(redis_db):
    b = IOBudget(redis_db, BudgetConfig(classes={"scrub": 1 * MiB}, foreground_share=0.1))
    pace = Pacer(b, "scrub")
    assert pace.rate() == 1 * MiB
    assert pace(512 << 10) == 0  # within the bucket's burst (one second of the rate)
    # 10 MiB read at once (the kernel was fast): owed, and paid at 1 MiB/s in steps of
    # the burst, so it is never refused for being larger than the bucket
    wait = pace(10 * MiB)
    assert 0.4 < wait <= 1.0 and pace.owed == 10 * MiB
    assert pace(0) > 0 and pace.charged == 512 << 10
    b.foreground(hold_ms=5000)
    assert pace.rate() == MiB // 10  # foreground traffic leaves background its share
    # ... or nothing, for work that yields to it (a scrub): it waits until it is quiet
    yielding = Pacer(b, "scrub", yield_to_foreground=True)
    assert yielding(4096) == FOREGROUND_WAIT and yielding.owed == 4096
    redis_db.delete(PREFIX + "foreground")
    assert yielding(0) == 0 and yielding.owed == 0
    unlimited = Pacer(IOBudget(redis_db, BudgetConfig()), "scrub")
    assert unlimited(1 << 40) == 0 and unlimited.rate() == 0
