"""Progress of long transfers: bytes done of the (estimated) total, as text (with rate and
ETA) and as the byte counts a Job records (``progress(pct, text, done=, total=)``)."""
import time

MiB = 1 << 20


class Meter:
    """``text(done)`` → "N bytes <verb> of ~T, R MiB/s, ETA S s" (the total is an estimate
    for send streams, whose size is known only at their end)."""

    def __init__(self, verb: str, total: int):
        self.verb = verb
        self.total = max(1, int(total))
        self.started = time.monotonic()

    def pct(self, done: int, lo: float, hi: float) -> float:
        return min(hi, lo + (hi - lo) * done / max(self.total, done, 1))

    def counts(self, done: int) -> dict:
        """``done=``/``total=`` for a job's ``progress()`` (the total is never below done)."""
        return {"done": done, "total": max(self.total, done)}

    def text(self, done: int) -> str:
        return f"{done} bytes {self.verb} of ~{max(self.total, done)}, {self.speed(done)}"

    def speed(self, done: int) -> str:
        """"R MiB/s, ETA S s" since the meter was made."""
        elapsed = max(1e-6, time.monotonic() - self.started)
        rate = done / elapsed
        eta = (max(self.total, done) - done) / rate if rate > 0 else 0
        return f"{rate / MiB:.1f} MiB/s, ETA {eta:.0f} s"
