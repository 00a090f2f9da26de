"""The I/O budget shared by all background work, as token buckets in Redis (no Django).

Every worker on the appliance draws from the same buckets, so the budget holds however many
workers run: one appliance bucket (``rate`` bytes/s, ``burst`` bytes) and optionally one per
job class (``replication``, ``backup``, ``migration``, ``scrub``, ``prewarm``...). Foreground
work (checkpoint saves and restores, client I/O) does not draw tokens; it *pre-empts*: each
call to :meth:`IOBudget.foreground` marks foreground traffic active for a second, and while
it is active background work gets only ``foreground_share`` of its rates.
:class:`ForegroundMarker` is what a foreground path calls on every request: it writes to
Redis at most once a second per process (a monotonic-clock check otherwise) and holds the
mark for two, so steady traffic keeps background slowed without a Redis call per request.
:class:`Pacer` charges bytes already used (a kernel scrub) and answers how long to pause.

The refill and take happen in one Lua script on Redis time, so buckets stay exact under
concurrency and clock skew between hosts does not matter. ``now`` can be passed in for tests.
"""
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import redis


log = logging.getLogger(__name__)
PREFIX = "strata:io:"
FOREGROUND_KEY = PREFIX + "foreground"
FOREGROUND_WAIT = 2.0  # what a Pacer that yields to foreground answers while it is on

# KEYS: the buckets; ARGV: want, now ("" = Redis time), then rate and burst per bucket.
# Takes ``want`` tokens from every bucket, or from none; returns the seconds to wait before
# asking again (0 when taken), as a string.
_TAKE = """
local want = tonumber(ARGV[1])
local now = tonumber(ARGV[2])
if now == nil then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local state = {}
local wait = 0
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[1 + 2 * i])
  local burst = tonumber(ARGV[2 + 2 * i])
  local b = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens = tonumber(b[1]) or burst
  local ts = tonumber(b[2]) or now
  if now > ts then tokens = math.min(burst, tokens + (now - ts) * rate) end
  if tokens < want then wait = math.max(wait, (want - tokens) / rate) end
  state[i] = tokens
end
for i, key in ipairs(KEYS) do
  local tokens = state[i]
  if wait == 0 then tokens = tokens - want end
  redis.call('HSET', key, 'tokens', tostring(tokens), 'ts', tostring(now))
  redis.call('EXPIRE', key, 3600)
end
return tostring(wait)
"""


@dataclass
class BudgetConfig:
    """Rates in bytes per second (0 = unlimited); ``classes`` maps a job class to its own
    cap; ``foreground_share`` is the fraction background keeps while foreground is busy."""

    rate: int = 0
    burst: int = 0
    classes: dict = field(default_factory=dict)
    foreground_share: float = 0.1

    def burst_for(self, rate: int, appliance: bool = True) -> int:
        """The appliance bucket holds ``burst`` (default: one second); a class bucket one
        second of its rate (at least 1 MiB)."""
        return max((self.burst if appliance else 0) or rate, 1 << 20)


class IOBudget:
    """Token buckets for background I/O on one Redis (every worker of the appliance)."""

    def __init__(self, client: redis.Redis, config: BudgetConfig):
        self.redis = client
        self.config = config
        self._take = client.register_script(_TAKE)

    def foreground(self, hold_ms: int = 1000) -> None:
        """Foreground traffic is happening: background slows down for ``hold_ms``."""
        self.redis.set(FOREGROUND_KEY, b"1", px=hold_ms)

    def foreground_active(self) -> bool:
        return bool(self.redis.exists(FOREGROUND_KEY))

    def _buckets(self, job_class: str) -> list:
        share = self.config.foreground_share if self.foreground_active() else 1.0
        out = []
        if self.config.rate:
            out.append(("appliance", self.config.rate, share,
                        self.config.burst_for(self.config.rate)))
        cls_rate = self.config.classes.get(job_class) or 0
        if cls_rate:
            out.append((f"class:{job_class}", cls_rate, share,
                        self.config.burst_for(cls_rate, appliance=False)))
        return out

    def try_take(self, nbytes: int, job_class: str, now: float | None = None) -> float:
        """Take ``nbytes`` from every bucket that applies, or from none; 0 when taken, else
        the seconds to wait before asking again."""
        buckets = self._buckets(job_class)
        if not buckets:
            return 0.0
        keys, args = [], [nbytes, "" if now is None else now]
        for name, rate, share, burst in buckets:
            keys.append(PREFIX + name)
            args += [max(1.0, rate * share), burst]
        return float(self._take(keys=keys, args=args))

    def take(self, nbytes: int, job_class: str, should_stop=lambda: False) -> float:
        """Block until ``nbytes`` may be used; return the seconds spent waiting."""
        waited = 0.0
        left = nbytes
        while left > 0:
            step = min([left] + [burst for *_, burst in self._buckets(job_class)])
            wait = self.try_take(step, job_class)
            if wait <= 0:
                left -= step
                continue
            if should_stop():
                break
            pause = min(wait, 0.5)  # re-check often: the foreground may end
            time.sleep(pause)
            waited += pause
        return waited

    def throttle(self, stream: Iterable[bytes], job_class: str) -> Iterator[bytes]:
        """Yield ``stream``'s chunks no faster than the budget allows."""
        for chunk in stream:
            self.take(len(chunk), job_class)
            yield chunk


class Pacer:
    """Paces work the budget cannot slow byte by byte, such as a scrub the kernel runs:
    call it with the bytes used since the last call; it owes them to the budget and
    answers how many seconds the work should wait (0: go on); call it with 0 while
    waiting. Debts are paid in steps no larger than a bucket's burst, so a large one is
    paid over time rather than refused. ``budget`` is the IOBudget or a function giving
    the current one (its configuration may change while the work runs). With
    ``yield_to_foreground`` it answers ``FOREGROUND_WAIT`` while foreground traffic is on,
    instead of going on at the foreground share: for work whose mere presence slows
    foreground I/O whatever its rate (a btrfs scrub delays transaction commits)."""

    def __init__(self, budget, job_class: str, yield_to_foreground: bool = False):
        self._budget = budget if callable(budget) else (lambda: budget)
        self.job_class = job_class
        self.yield_to_foreground = yield_to_foreground
        self.owed = 0
        self.charged = 0  # bytes paid so far

    def rate(self) -> int:
        """Bytes per second the class may use now (0: no limit): its lowest bucket rate,
        cut to the foreground share while foreground traffic is on. A scrub gives it to the
        kernel as its own limit, so that it rarely has to pause."""
        rates = [rate * share for _, rate, share, _ in self._budget()._buckets(self.job_class)]
        return int(max(1.0, min(rates))) if rates else 0

    def __call__(self, nbytes: int) -> float:
        self.owed += max(0, int(nbytes))
        budget = self._budget()
        if self.yield_to_foreground and budget.foreground_active():
            return FOREGROUND_WAIT  # owed until the foreground is quiet
        while self.owed > 0:
            bursts = [burst for *_, burst in budget._buckets(self.job_class)]
            step = min([self.owed] + bursts)
            wait = budget.try_take(step, self.job_class) if bursts else 0.0
            if wait > 0:
                return wait
            self.owed -= step
            self.charged += step
        return 0.0


class ForegroundMarker:
    """Call it on every foreground request: marks foreground traffic active in Redis at most
    once per ``every`` seconds in this process, for ``hold_ms``. Never raises: foreground
    work must not fail because the budget's Redis is away (that is logged, once a minute)."""

    def __init__(self, client: redis.Redis, every: float = 1.0, hold_ms: int = 2000):
        self.redis, self.every, self.hold_ms = client, every, hold_ms
        self._last = float("-inf")
        self._warned = float("-inf")

    def __call__(self) -> bool:
        """True when this call wrote the mark."""
        return self.due() and self.write()

    def due(self) -> bool:
        """True (once) when the mark is to be written again: a clock check, no I/O. An event
        loop calls this inline and :meth:`write` on a thread."""
        now = time.monotonic()
        if now - self._last < self.every:
            return False
        self._last = now
        return True

    def write(self) -> bool:
        """Write the mark now; False (logged) if Redis did not take it."""
        now = time.monotonic()
        try:
            self.redis.set(FOREGROUND_KEY, b"1", px=self.hold_ms)
        except redis.RedisError as exc:
            if now - self._warned > 60:
                self._warned = now
                log.warning("cannot mark foreground traffic in the I/O budget: %s", exc)
            return False
        return True
