"""Object bytes on disk: append-only segment files for small objects, one file per large object.

Layout under ``data_root``::

    segments/00000001.seg      small objects, appended back to back (index holds offset, size)
    buckets/<name>/bucket.json bucket settings (written atomically)
    buckets/<name>/index/      SQLite shards (:mod:`.index`)
    buckets/<name>/data/xx/ID  large objects, one file each (multipart: one file per part)
    buckets/<name>/uploads/ID/ multipart uploads in progress
    tmp/                       partial large bodies; emptied at start-up

Nothing here makes an object visible: that happens only when the committer writes the index
entry, after the bytes are fsynced. A crash leaves at worst unreferenced bytes (a segment
tail, a file in tmp/ or data/), never a referenced partial object.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from typing import Iterator

SMALL_OBJECT_LIMIT = 128 * 1024
SEGMENT_SIZE = 256 * 1024 * 1024
READ_BLOCK = 1024 * 1024


def fsync_dir(path: str) -> None:
    """Make directory entries (creates, renames) in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


class SegmentStore:
    """Append-only segment files shared by every bucket; appends happen on the event loop."""

    def __init__(self, root: str, segment_bytes: int = SEGMENT_SIZE):
        self.segment_bytes = segment_bytes
        self.dir = os.path.join(root, "segments")
        os.makedirs(self.dir, exist_ok=True)
        ids = [int(n.split(".")[0]) for n in os.listdir(self.dir) if n.endswith(".seg")]
        self._lock = threading.Lock()
        self._read_fds: dict = {}
        self._dirty: set[int] = set()
        self._write_fds: dict[int, int] = {}
        # never append to a segment from a previous run: its tail may be torn
        self._open_segment(max(ids, default=0) + 1)

    def _open_segment(self, seg_id: int) -> None:
        path = os.path.join(self.dir, f"{seg_id:08d}.seg")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        fsync_dir(self.dir)
        self.seg_id, self.fd, self.offset = seg_id, fd, 0
        self._write_fds[seg_id] = fd

    def append(self, data: bytes) -> dict:
        """Write ``data`` at the end of the active segment (not yet durable); return its location."""
        with self._lock:
            if self.offset + len(data) > self.segment_bytes and self.offset:
                self._open_segment(self.seg_id + 1)
            offset = self.offset
            self.offset += len(data)
            seg_id, fd = self.seg_id, self.fd
        view = memoryview(data)
        written = 0
        while written < len(data):
            written += os.pwrite(fd, view[written:], offset + written)
        with self._lock:
            # marked dirty only once written: a sync that takes the mark must cover these bytes
            self._dirty.add(seg_id)
        return {"seg": seg_id, "off": offset}

    def sync(self) -> None:
        """fdatasync every segment appended to since the last call (one fsync covers many PUTs)."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            fds = [(s, self._write_fds[s]) for s in dirty]
        for seg_id, fd in fds:
            os.fdatasync(fd)
            if seg_id != self.seg_id:
                with self._lock:
                    if seg_id not in self._dirty and self._write_fds.get(seg_id) == fd:
                        del self._write_fds[seg_id]
                        os.close(fd)

    def closed_segments(self) -> list[tuple[int, int]]:
        """(segment id, file size) of every segment no longer appended to."""
        out = []
        for name in os.listdir(self.dir):
            if name.endswith(".seg"):
                seg_id = int(name.split(".")[0])
                if seg_id < self.seg_id:
                    out.append((seg_id, os.path.getsize(os.path.join(self.dir, name))))
        return sorted(out)

    def remove(self, seg_id: int) -> None:
        """Delete a segment nothing refers to any more."""
        with self._lock:
            if seg_id >= self.seg_id or seg_id in self._dirty:
                raise ValueError(f"segment {seg_id} is still being written")
            fd = self._write_fds.pop(seg_id, None)
            if fd is not None:
                os.close(fd)
            # readers may hold the file object: dropping it lets the last one close it
            self._read_fds.pop(seg_id, None)
        os.unlink(os.path.join(self.dir, f"{seg_id:08d}.seg"))

    def read(self, loc: dict, size: int, start: int = 0, length: int | None = None) -> bytes:
        """Bytes of a small object (optionally a sub-range)."""
        seg_id = loc["seg"]
        fh = self._read_fds.get(seg_id)
        if fh is None:
            fh = open(os.path.join(self.dir, f"{seg_id:08d}.seg"), "rb", buffering=0)
            self._read_fds[seg_id] = fh
        length = size - start if length is None else length
        return os.pread(fh.fileno(), length, loc["off"] + start)


class LargeFileWriter:
    """Stream one large body into a new file under ``tmp/``; ``finish`` makes it durable in place."""

    def __init__(self, root: str, final_dir: str):
        self.tmp_path = os.path.join(root, "tmp", uuid.uuid4().hex)
        self.final_dir = final_dir
        self.fh = open(self.tmp_path, "wb", buffering=0)
        self.size = 0

    def write(self, data: bytes) -> None:
        """Append ``data`` (call from a worker thread)."""
        view = memoryview(data)
        while view:
            n = self.fh.write(view)
            view = view[n:]
        self.size += len(data)

    def finish(self, name: str | None = None) -> str:
        """fsync, move into ``final_dir`` and fsync the directory; returns the final path."""
        os.fsync(self.fh.fileno())
        self.fh.close()
        name = name or uuid.uuid4().hex
        sub = os.path.join(self.final_dir, name[:2])
        os.makedirs(sub, exist_ok=True)
        path = os.path.join(sub, name)
        os.replace(self.tmp_path, path)
        fsync_dir(sub)
        return path

    def abort(self) -> None:
        """Drop the partial file."""
        try:
            self.fh.close()
        finally:
            try:
                os.unlink(self.tmp_path)
            except FileNotFoundError:
                pass


def file_ranges(loc: dict, size: int, start: int, end: int) -> list[tuple[str, int, int]]:
    """(path, offset, length) pieces covering object bytes [start, end) of a file-backed object."""
    if "file" in loc:
        return [(loc["file"], start, end - start)]
    pieces, base = [], 0
    for path, part_size in loc["parts"]:
        lo, hi = max(start, base), min(end, base + part_size)
        if lo < hi:
            pieces.append((path, lo - base, hi - lo))
        base += part_size
    return pieces


def open_pieces(pieces: list[tuple[str, int, int]]) -> list:
    """Open every file of ``pieces`` (blocking); [(file object, offset, length)]."""
    handles = []
    try:
        for path, offset, length in pieces:
            handles.append((open(path, "rb", buffering=0), offset, length))
    except BaseException:
        for fh, _, _ in handles:
            fh.close()
        raise
    return handles


def read_open_pieces(handles: list) -> Iterator[bytes]:
    """Yield the bytes of opened pieces in blocks of at most READ_BLOCK (blocking I/O)."""
    for fh, offset, length in handles:
        while length > 0:
            data = os.pread(fh.fileno(), min(READ_BLOCK, length), offset)
            if not data:
                raise IOError(f"{fh.name} is shorter than the index says; run a scrub")
            offset += len(data)
            length -= len(data)
            yield data


def remove_location(loc: dict) -> None:
    """Delete the files of a replaced large, multipart or cold object (segments are compacted later)."""
    paths = [loc["file"]] if "file" in loc else [p for p, _ in loc.get("parts", [])]
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    if "dir" in loc:
        shutil.rmtree(loc["dir"], ignore_errors=True)
    if "restore" in loc:  # a cold object's temporary hot copy (RestoreObject)
        remove_location(loc["restore"])


def reset_tmp(root: str) -> None:
    """Empty ``tmp/`` (partial bodies from before a crash) and recreate it."""
    tmp = os.path.join(root, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp, exist_ok=True)
