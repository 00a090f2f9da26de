"""Write-ahead log: numbered segment files of CRC-framed records, with group commit.

A record is ``<u32 length><u32 crc32><payload>``. Appends happen under the collection's
write lock (so log order is apply order); :meth:`WriteAheadLog.sync` is called after the
lock is released, and concurrent callers share one ``fdatasync``: the first waiter syncs
everything written so far, the others find their record already durable.

Segments are ``wal/<12-digit number>.log``. A checkpoint seals the current segment
(:meth:`rotate`) and records the first segment it does not contain; after the checkpoint
is on disk the older segments are deleted (:meth:`delete_before`).
"""

import os
import struct
import threading
import zlib

from plumbing.atomic import fsync_dir

from .errors import CorruptCollection

_HEADER = struct.Struct("<II")
MAX_RECORD = 1 << 31


def segment_path(wal_dir, number):
    """Path of segment ``number`` in ``wal_dir``."""
    return os.path.join(wal_dir, f"{number:012d}.log")


def list_segments(wal_dir):
    """Sorted segment numbers present in ``wal_dir``."""
    out = []
    for name in os.listdir(wal_dir):
        if name.endswith(".log") and name[:-4].isdigit():
            out.append(int(name[:-4]))
    return sorted(out)


def read_segment(path, is_last):
    """Yield the payloads of a segment's whole records.

    A torn or corrupt tail of the last segment (a crash in mid-write) is cut off; damage in
    an older, sealed segment raises :class:`CorruptCollection`.
    """
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    good_end = 0
    while pos < len(data):
        if pos + _HEADER.size > len(data):
            break
        length, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        end = start + length
        if end > len(data) or zlib.crc32(data[start:end]) != crc:
            break
        yield data[start:end]
        pos = good_end = end
    if good_end != len(data):
        if not is_last:
            raise CorruptCollection(
                f"write-ahead log segment {path} is damaged at byte {good_end}; restore the"
                " collection from a snapshot")
        with open(path, "r+b") as f:
            f.truncate(good_end)
            f.flush()
            os.fsync(f.fileno())


class WriteAheadLog:
    """The append side of the log for one collection (see the module docstring)."""

    def __init__(self, wal_dir, segment):
        self.dir = wal_dir
        self.segment = segment
        self._cond = threading.Condition(threading.Lock())
        self._written = 0       # records appended (monotonic sequence number)
        self._synced = 0        # records known durable
        self._syncing = False
        self.fsyncs = 0
        self.bytes_since_rotate = 0
        self._fd = self._open(segment)

    def _open(self, number):
        fd = os.open(segment_path(self.dir, number), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.dir)
        return fd

    @property
    def written(self):
        """Number of records appended since open."""
        return self._written

    def append(self, payload):
        """Write one record (not yet durable) and return its sequence number.

        Callers serialize appends (the collection's write lock).
        """
        if len(payload) >= MAX_RECORD:
            raise ValueError("write-ahead log record too large")
        rec = _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        view = memoryview(rec)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.bytes_since_rotate += len(rec)
        with self._cond:
            self._written += 1
            return self._written

    def sync(self, seq):
        """Return once record ``seq`` is on disk, sharing fsyncs with concurrent callers."""
        with self._cond:
            while self._synced < seq:
                if self._syncing:
                    self._cond.wait()
                    continue
                self._syncing = True
                target, fd = self._written, self._fd
                self._cond.release()
                try:
                    os.fdatasync(fd)
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    self.fsyncs += 1
                    self._synced = max(self._synced, target)
                    self._cond.notify_all()

    def rotate(self):
        """Seal the current segment (fsync) and start the next; return the new number.

        Callers must exclude appends (hold the collection lock shared or exclusive).
        """
        with self._cond:
            while self._syncing:
                self._cond.wait()
            os.fdatasync(self._fd)
            self.fsyncs += 1
            os.close(self._fd)
            self._synced = self._written
            self.segment += 1
            self._fd = self._open(self.segment)
            self.bytes_since_rotate = 0
            self._cond.notify_all()
            return self.segment

    def delete_before(self, number):
        """Delete sealed segments numbered below ``number`` (they are in a checkpoint)."""
        for seg in list_segments(self.dir):
            if seg < number:
                os.unlink(segment_path(self.dir, seg))
        fsync_dir(self.dir)

    def close(self):
        """fsync and close the current segment."""
        with self._cond:
            while self._syncing:
                self._cond.wait()
            if self._fd is not None:
                os.fdatasync(self._fd)
                os.close(self._fd)
                self._fd = None
                self._synced = self._written
