"""A btrfs scrub that yields to its caller's I/O budget (used by the local driver).

The kernel scrubs as fast as the devices read, so the budget is applied two ways:

- The scrub's rate: when ``throttle`` has a ``rate()`` (bytes/s the caller allows now, 0 for
  no limit) it is written, shared out among the devices, to the kernel's own per-device
  limit (``/sys/fs/btrfs/<fsid>/devinfo/<id>/scrub_speed_max``), again each time it changes
  (foreground traffic lowers it), and put back as it was at the end (and while the budget
  sets no limit).
- Pauses: the bytes read (from the kernel, 10 times a second) are told to
  ``throttle(nbytes) -> seconds``; when it answers a wait of a second or more (the budget is
  spent by other work, or foreground traffic is on: the plane's pacer yields to it, as a
  scrub slows an fsync-heavy writer even at a low rate) the scrub is paused with ``btrfs
  scrub cancel`` and resumed with ``btrfs scrub resume`` once ``throttle(0)`` answers 0.
  Shorter waits are slept through without pausing.

Why not pause on every wait: ``btrfs scrub resume`` starts again at the beginning of the
block group (chunk, up to 1 GiB) the scrub was in, so a scrub paused more often than it takes
to read one chunk reads the same chunk again and again and never finishes; the rate limit
keeps pauses rare. The scrub runs at idle I/O priority (``-c 3``), which schedulers with
priorities (bfq, mq-deadline) honour. A worker killed mid-scrub leaves the kernel scrubbing
at the limit it had last set, with nobody pacing it: :func:`stop_orphan` stops that scrub
and lifts the limit (the plane calls it when the next worker finds the scrub's Job
interrupted); the scrub can be run again.
"""
import tempfile
import time
from pathlib import Path

from . import btrfs
from ..driver import ScrubResult
from ..errors import Cancelled, CommandFailed, InUse
from ..runner import Runner

POLL = 0.1          # seconds between looks at a paced scrub
PAUSE_AFTER = 1.0   # a wait at least this long pauses the scrub; shorter ones are slept


class PacedScrub:
    """One scrub of the btrfs file system mounted at ``mnt`` (see the module doc)."""

    def __init__(self, runner: Runner, mnt: Path, name: str, progress=None,
                 should_cancel=None, throttle=None, poll_interval: float = 0.5):
        self.runner, self.mnt, self.name = runner, mnt, name
        self.progress, self.should_cancel, self.throttle = progress, should_cancel, throttle
        self.poll = min(poll_interval, POLL) if throttle else poll_interval
        self.total = max(btrfs.used_bytes(runner, mnt), 1)
        self.earlier = 0   # bytes read by the runs before the current one (start, resumes)
        self.live = 0      # bytes read by the current run, as last seen
        self.charged = 0   # bytes told to throttle
        self.pauses = 0
        self._asked = 0.0
        self._limits = {}  # scrub_speed_max file -> its value before this scrub
        self._applied = "unset"

    def run(self) -> ScrubResult:
        """Scrub to the end; Cancelled when asked to stop (the scrub is stopped then)."""
        with tempfile.TemporaryFile() as err:
            proc = None
            try:
                if getattr(self.throttle, "rate", None) is not None:
                    self._limits = {f: f.read_text().strip()
                                    for f in btrfs.scrub_speed_files(self.mnt)}
                    self._apply_rate()
                proc = btrfs.scrub_process(self.runner, self.mnt, err=err)
                while True:
                    self._check_cancel(0.5)  # a database query in the plane
                    self.live = max(self.live, btrfs.scrub_live_bytes(self.mnt) or 0)
                    if proc.poll() is not None:
                        break
                    self._report("scrubbed")
                    wait = self._charge(self.earlier + self.live)
                    if wait < PAUSE_AFTER:
                        time.sleep(max(wait, self.poll))
                        continue
                    if not self._pause(proc, wait):
                        break  # it finished before the cancel landed
                    err.seek(0)
                    err.truncate()
                    proc = btrfs.scrub_process(self.runner, self.mnt, resume=True, err=err)
                err.seek(0)
                stderr = err.read().decode(errors="replace")
            finally:
                if proc is not None and proc.poll() is None:
                    btrfs.scrub_cancel(self.runner, self.mnt)
                    proc.wait()
                _write_limits(self._limits)
        return self._result(proc, stderr)

    def _pause(self, proc, wait: float) -> bool:
        """Cancel the scrub (its position is kept) and wait until ``throttle`` lets it go
        on; False if it had finished before the cancel."""
        btrfs.scrub_cancel(self.runner, self.mnt)
        proc.wait()
        status = btrfs.scrub_status(self.runner, self.mnt)
        if status["status"] == "finished":
            return False
        self.pauses += 1
        self.earlier, self.live = max(self.earlier + self.live, _scrubbed(status)), 0
        wait = max(wait, self._charge(self.earlier))  # what it read before the cancel landed
        while wait > 0:
            self._check_cancel(0)
            self._report("paused for the I/O budget after")
            time.sleep(min(wait, 0.5))
            self._apply_rate()
            wait = self.throttle(0)
        return True

    def _charge(self, done: int) -> float:
        if self.throttle is None:
            return 0.0
        self._apply_rate()
        wait = self.throttle(max(0, done - self.charged))
        self.charged = max(self.charged, done)
        return wait

    def _apply_rate(self) -> None:
        if not self._limits:
            return
        rate = int(self.throttle.rate() or 0)
        per_device = max(1, rate // len(self._limits)) if rate else None
        if per_device != self._applied:
            for path, before in self._limits.items():  # no budget: the limit it had
                path.write_text(before if per_device is None else str(per_device))
            self._applied = per_device

    def _check_cancel(self, every: float) -> None:
        if self.should_cancel and time.monotonic() - self._asked >= every:
            self._asked = time.monotonic()
            if self.should_cancel():
                raise Cancelled(f"scrub of pool {self.name!r} was cancelled")

    def _report(self, what: str) -> None:
        done = self.earlier + self.live
        if self.progress:
            self.progress(min(99.0, 100.0 * done / self.total),
                          f"{what} {done} of ~{self.total} bytes",
                          done=done, total=max(done, self.total))

    def _result(self, proc, stderr: str) -> ScrubResult:
        status = btrfs.scrub_status(self.runner, self.mnt)
        if proc.returncode != 0 and "already running" in stderr.lower():
            raise InUse(f"a scrub is already running on pool {self.name!r}")
        if status["status"] in ("aborted", "interrupted", "cancelled"):
            raise Cancelled(f"scrub of pool {self.name!r} was {status['status']} before it "
                            "finished")
        if status["status"] != "finished":
            raise CommandFailed(proc.args, proc.returncode, stderr)
        done = _scrubbed(status)
        result = ScrubResult(
            bytes_scrubbed=done,
            errors_corrected=status.get("corrected_errors", 0),
            errors_uncorrectable=status.get("uncorrectable_errors", 0)
            + status.get("unverified_errors", 0),
            pauses=self.pauses)
        if self.progress:
            self.progress(100.0, f"scrub finished: {done} bytes, {result.errors_corrected} "
                                 f"corrected, {result.errors_uncorrectable} uncorrectable"
                                 + (f", paused {self.pauses} times for the I/O budget"
                                    if self.pauses else ""),
                          done=done, total=done)
        return result


def _scrubbed(status: dict) -> int:
    """Bytes read by a scrub so far, all its runs (start and resumes) together."""
    return status.get("data_bytes_scrubbed", 0) + status.get("tree_bytes_scrubbed", 0)


def stop_orphan(runner: Runner, mnt: Path) -> bool:
    """Stop a scrub whose pacer died (its process was killed) and put the kernel's scrub
    limit back to none, as mounting gives it; True if a scrub was running."""
    running = btrfs.scrub_status(runner, mnt)["status"] == "running"
    if running:
        btrfs.scrub_cancel(runner, mnt)
    _write_limits({path: "0" for path in btrfs.scrub_speed_files(mnt)})
    return running


def _write_limits(limits: dict) -> None:
    """Write each kernel scrub limit file its value (bytes/s as text, "0": none)."""
    for path, value in limits.items():
        try:
            path.write_text(value)
        except OSError:  # the device left the file system meanwhile
            pass
