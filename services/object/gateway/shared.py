"""What the worker processes of one gateway (``--workers N``, see :mod:`.workers`) share
besides the index shards and the files: locks, the settings generation, and the sequence
floors of writes in flight. It lives in ``<data_root>/run/`` (a bucket's locks in its
directory), and none of it needs a process to clean up after a ``kill -9``: ``flock`` locks
die with their holder, and the parent resets a dead worker's floor before it starts the next
one.

- :class:`FileLock`: one holder at a time across processes (a lifecycle pass, a compaction),
  or shared/exclusive (version removals against a snapshot being recorded). Taken by polling
  with ``LOCK_NB`` from the event loop, so a wait holds no thread.
- :class:`Generation`: a log every worker checks before each request (with inotify, see
  :mod:`.watch`: no system call unless it was written); a change of bucket settings, a bucket
  created or deleted, a snapshot taken or dropped appends to it.
- Sequence numbers (:func:`next_seq`): increasing and unique across the workers, each
  worker's in its own slot of the lowest bits.
- :class:`SeqFloors`: per worker, the lowest sequence number it may still commit (see
  :func:`.snapshots.changes`: the change feed's horizon stays below every write in flight in
  any worker).
"""
from __future__ import annotations

import asyncio
import contextlib
import fcntl
import mmap
import os
import struct
import threading
import time

from plumbing.inodeflags import FS_NOCOW_FL, set_flag

IDLE = (1 << 63) - 1     # a floor of a worker with nothing in flight
MAX_WORKERS = 256


def run_dir(root: str) -> str:
    """``<data_root>/run``, made if missing."""
    path = os.path.join(root, "run")
    os.makedirs(path, exist_ok=True)
    return path


class FileLock:
    """An ``flock`` on ``path`` (created if missing); every :meth:`hold` opens its own file
    description, so holders in one process exclude each other as holders in two do."""

    POLL = 0.01

    def __init__(self, path: str):
        self.path = path

    def _try(self, mode: int) -> int | None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            os.close(fd)
            return None

    @contextlib.asynccontextmanager
    async def hold(self, shared: bool = False):
        """Hold the lock (shared or exclusive) for the ``async with`` block."""
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        while (fd := self._try(mode)) is None:
            await asyncio.sleep(self.POLL)
        try:
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def held(self, shared: bool = False):
        """Hold the lock in a blocking call (on a worker thread)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def busy(self) -> bool:
        """True while some holder has it (exclusively or shared)."""
        fd = self._try(fcntl.LOCK_EX)
        if fd is None:
            return True
        os.close(fd)
        return False


class Generation:
    """What changed in bucket settings, shared by every process on one data root: a writer
    appends the bucket's name (``*``: a bucket was created or deleted) once the change is
    durable; a reader checks with one ``stat`` per request and reads only what was appended
    since it last looked (the file only grows, so no change is ever missed, unlike an mtime)."""

    def __init__(self, root: str):
        self.path = os.path.join(run_dir(root), "generation")
        # kept open to check its size with fstat (no path lookup per request); the file is
        # never replaced while a process of the data root runs (see restart)
        self._fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.seen = os.fstat(self._fd).st_size
        self._watch = None   # a .watch.Watch of the file, once watch() was called

    def watch(self, notifier) -> None:
        """From now on check the file only when inotify reported a write to it (``notifier``:
        a :class:`.watch.Notifier`, or None: check on every call)."""
        self._watch = notifier.watch_file(self.path) if notifier is not None else None

    @staticmethod
    def restart(root: str) -> None:
        """Empty the log (only while no process of the data root runs: at the start of a
        gateway, before any worker)."""
        with open(os.path.join(run_dir(root), "generation"), "wb"):
            pass

    def bump(self, name: str) -> None:
        """Tell every process that bucket ``name`` changed (``*``: the set of buckets)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, name.encode() + b"\n")
        finally:
            os.close(fd)

    def changes(self, look: bool = False) -> set[str]:
        """Names changed (by any process, this one too) since the last call; empty if none.
        The caller reloads after the call, so a change made during the reload is seen next.
        ``look``: read the file even if inotify has reported nothing yet, as after taking a
        lock another process released once it had written (its event may still be unread)."""
        if self._watch is not None and not look and not self._watch.changed():
            return set()
        size = os.fstat(self._fd).st_size
        if size <= self.seen:
            return set()
        data = os.pread(self._fd, size - self.seen, self.seen)
        whole = data.rfind(b"\n") + 1  # a line being appended is read next time
        self.seen += whole
        return set(data[:whole].decode(errors="replace").split())


_seq_lock = threading.Lock()
_last_seq = 0
_seq_slot = 0
SEQ_SLOTS = 256


def set_seq_slot(slot: int) -> None:
    """Make this process's sequence numbers ``slot`` modulo :data:`SEQ_SLOTS` (its worker
    slot, see .workers), so that no two worker processes ever take the same one."""
    global _seq_slot, _last_seq
    with _seq_lock:
        _seq_slot, _last_seq = slot % SEQ_SLOTS, 0


def seq_floor_now() -> int:
    """A number no sequence number taken from now on, in any process, is below."""
    return time.time_ns() - SEQ_SLOTS


def next_seq() -> int:
    """An increasing sequence number, unique across the worker processes of a data root
    (nanoseconds, their lowest bits the worker slot, never repeating)."""
    global _last_seq
    with _seq_lock:
        now = time.time_ns() // SEQ_SLOTS * SEQ_SLOTS + _seq_slot
        _last_seq = max(_last_seq + SEQ_SLOTS, now)
        return _last_seq


def set_nocow(fd: int) -> None:
    """Mark an empty file NOCOW (btrfs; nothing elsewhere). A memory-mapped file on a full
    btrfs otherwise gets SIGBUS on a write to a clean page: copy-on-write needs a new block
    for it."""
    set_flag(fd, FS_NOCOW_FL)


class SeqFloors:
    """One 8-byte slot per worker in ``run/seqfloors``: the lowest sequence number that worker
    may still commit (:data:`IDLE` when it has nothing in flight). A worker writes its floor
    *before* it takes a sequence number (so a reader that computed a horizon earlier sees
    either the floor or a number above its horizon) and raises it as batches commit."""

    def __init__(self, root: str, slot: int | None):
        path = os.path.join(run_dir(root), "seqfloors")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size == 0:           # new: NOCOW, its blocks written (not sparse) before the map
                set_nocow(fd)
            if size < MAX_WORKERS * 8:
                os.pwrite(fd, bytes(MAX_WORKERS * 8 - size), size)
                os.fsync(fd)
            self.map = mmap.mmap(fd, MAX_WORKERS * 8)
        finally:
            os.close(fd)
        self.slot = slot
        if slot is not None:
            self.set(IDLE)

    def set(self, value: int, slot: int | None = None) -> None:
        struct.pack_into("<q", self.map, 8 * (self.slot if slot is None else slot), value)

    def get(self, slot: int) -> int:
        return struct.unpack_from("<q", self.map, 8 * slot)[0]

    def lowest(self) -> int:
        """The lowest floor of every worker (:data:`IDLE` if none has a write in flight);
        slots never used read 0 only before their worker started: treated as idle."""
        values = [v for v in struct.unpack_from(f"<{MAX_WORKERS}q", self.map) if v > 0]
        return min(values, default=IDLE)

    def reset(self, workers: int) -> None:
        """Mark every slot idle (the parent, before starting workers or one of them again)."""
        for slot in range(workers):
            self.set(IDLE, slot)
