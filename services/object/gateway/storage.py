"""Object bytes on disk: append-only segment files for small objects, one file per large object.

Layout under ``data_root``::

    segments/00000001.seg      small objects, appended back to back (index holds offset, size);
                               each process appends only to its own (see SegmentStore)
    buckets/<name>/bucket.json bucket settings (written atomically)
    buckets/<name>/index/      SQLite shards (:mod:`.index`)
    buckets/<name>/data/xx/ID  large objects, one file each (multipart: one file per part)
    buckets/<name>/uploads/ID/ multipart uploads in progress
    tmp/                       partial large bodies not written in place; emptied at start-up

Nothing here makes an object visible: that happens only when the committer writes the index
entry, after the bytes are fsynced. A crash leaves at worst unreferenced bytes (a segment
tail, a file in tmp/ or data/), never a referenced partial object.
"""
from __future__ import annotations

import collections
import fcntl
import mmap
import os
import shutil
import threading
import uuid
from typing import Iterator

from plumbing.atomic import fsync_dir

SMALL_OBJECT_LIMIT = 128 * 1024
SEGMENT_SIZE = 256 * 1024 * 1024
READ_BLOCK = 1024 * 1024
MAX_IOV = 512   # buffers in one pwritev (the kernel takes up to IOV_MAX, 1024)


def _pwritev_all(fd: int, blocks: list, offset: int) -> None:
    """Write ``blocks`` back to back at ``offset``, finishing any short write."""
    done = os.pwritev(fd, blocks, offset)
    want = sum(len(b) for b in blocks)
    if done < want:  # rare: the rest, one buffer at a time
        rest = memoryview(b"".join(blocks))[done:]
        offset += done
        while rest:
            n = os.pwrite(fd, rest, offset)
            rest, offset = rest[n:], offset + n


class SegmentStore:
    """Append-only segment files shared by every bucket; appends come from the event loop
    (copies, compaction) and from the group committer's thread (a batch of small PUTs).

    Every process serving the data root (:mod:`.workers`) appends only to segments it made
    itself: a new segment takes a number no process ever used (above every file and the
    high-water mark kept in ``segments/LOCK``, under that file's ``flock``) and is created
    with ``O_EXCL``. Its maker holds an ``flock`` on it from its creation (under the same lock)
    until its last bytes are fsynced; so a segment nobody holds will never grow again, which
    is what :meth:`closed_segments` reports to compaction, whatever process made it (or died
    holding it)."""

    def __init__(self, root: str, segment_bytes: int = SEGMENT_SIZE):
        self.segment_bytes = segment_bytes
        self.dir = os.path.join(root, "segments")
        os.makedirs(self.dir, exist_ok=True)
        self._lock_path = os.path.join(self.dir, "LOCK")
        self._lock = threading.Lock()
        self._read_fds: dict = {}
        self._dirty: set[int] = set()
        self._writing: dict[int, int] = {}   # segment id -> writes reserved, not yet ended
        self._write_fds: dict[int, int] = {}
        # never append to a segment from a previous run: its tail may be torn
        self._open_segment()

    def _ids(self) -> list[int]:
        return [int(n.split(".")[0]) for n in os.listdir(self.dir) if n.endswith(".seg")]

    def _open_segment(self) -> None:
        lock = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            high = os.pread(lock, 32, 0).strip()
            seg_id = max(int(high or 0), max(self._ids(), default=0)) + 1
            path = os.path.join(self.dir, f"{seg_id:08d}.seg")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)  # ours until it is closed (see the class doc)
            os.ftruncate(lock, 0)
            os.pwrite(lock, str(seg_id).encode(), 0)
        finally:
            os.close(lock)
        fsync_dir(self.dir)
        self.seg_id, self.fd, self.offset = seg_id, fd, 0
        self._write_fds[seg_id] = fd

    def _reserve(self, size: int) -> tuple[int, int, int]:
        """(segment id, fd, offset) of the next ``size`` bytes (call holding ``_lock``); the
        segment counts a writer until :meth:`_written`, and its fd stays open meanwhile."""
        if self.offset + size > self.segment_bytes and self.offset:
            old = self.seg_id
            self._open_segment()
            # synced already and no write in flight: closed for good (else sync closes it)
            if old not in self._dirty and not self._writing.get(old):
                os.close(self._write_fds.pop(old))
        offset = self.offset
        self.offset += size
        self._writing[self.seg_id] = self._writing.get(self.seg_id, 0) + 1
        return self.seg_id, self.fd, offset

    def _written(self, seg_id: int) -> None:
        """A write reserved in ``seg_id`` ended (call holding ``_lock``): marked dirty only
        now, so that a sync that takes the mark covers its bytes."""
        left = self._writing.pop(seg_id) - 1
        if left:
            self._writing[seg_id] = left
        self._dirty.add(seg_id)

    def append(self, data: bytes) -> dict:
        """Write ``data`` at the end of the active segment (not yet durable); return its location."""
        return self.append_many([data])[0]

    def append_many(self, blocks: list) -> list[dict]:
        """Write ``blocks`` back to back at the end of the active segment (not yet durable),
        with one ``pwritev`` for each run that lands in one segment; their locations. Safe
        from any thread (the group committer writes a batch's small bodies this way)."""
        with self._lock:
            places = [self._reserve(len(b)) for b in blocks]
        try:
            i = 0
            while i < len(places):
                seg_id, fd, offset = places[i]
                j = i + 1
                while j < len(places) and places[j][0] == seg_id and j - i < MAX_IOV:
                    j += 1
                _pwritev_all(fd, blocks[i:j], offset)
                i = j
        finally:
            with self._lock:
                for seg_id, _, _ in places:
                    self._written(seg_id)
        return [{"seg": seg_id, "off": offset} for seg_id, _, offset in places]

    def sync(self) -> None:
        """fdatasync every segment appended to since the last call (one fsync covers many PUTs)."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            fds = [(s, self._write_fds[s]) for s in dirty]
        for seg_id, fd in fds:
            os.fdatasync(fd)
            if seg_id != self.seg_id:
                with self._lock:
                    if (seg_id not in self._dirty and not self._writing.get(seg_id)
                            and self._write_fds.get(seg_id) == fd):
                        del self._write_fds[seg_id]
                        os.close(fd)  # and its flock: closed for good

    def closed_segments(self) -> list[tuple[int, int]]:
        """(segment id, file size) of every segment no process will append to any more."""
        out = []
        lock = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_SH)  # no segment is between its creation and its flock
            for seg_id in self._ids():
                path = os.path.join(self.dir, f"{seg_id:08d}.seg")
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    out.append((seg_id, os.fstat(fd).st_size))
                except BlockingIOError:
                    pass  # a live process appends to it (or has yet to fsync it)
                finally:
                    os.close(fd)
        finally:
            os.close(lock)
        return sorted(out)

    def remove(self, seg_id: int) -> None:
        """Delete a segment nothing refers to any more."""
        with self._lock:
            if seg_id in self._write_fds or seg_id in self._dirty or seg_id in self._writing:
                raise ValueError(f"segment {seg_id} is still being written")
            # readers may hold the file object: dropping it lets the last one close it
            self._read_fds.pop(seg_id, None)
        os.unlink(os.path.join(self.dir, f"{seg_id:08d}.seg"))

    def drop_removed(self) -> None:
        """Forget read handles of segments that were deleted (by compaction in any process), so
        their space is freed."""
        for seg_id, fh in list(self._read_fds.items()):
            try:
                gone = os.fstat(fh.fileno()).st_nlink == 0
            except (OSError, ValueError):
                gone = True
            if gone and self._read_fds.get(seg_id) is fh:
                del self._read_fds[seg_id]

    def read(self, loc: dict, size: int, start: int = 0, length: int | None = None) -> bytes:
        """Bytes of a small object (optionally a sub-range)."""
        seg_id = loc["seg"]
        fh = self._read_fds.get(seg_id)
        if fh is None:
            fh = open(os.path.join(self.dir, f"{seg_id:08d}.seg"), "rb", buffering=0)
            self._read_fds[seg_id] = fh
        length = size - start if length is None else length
        return os.pread(fh.fileno(), length, loc["off"] + start)


DIRECT_ALIGN = 4096
DIRECT_BUFFER = 2 * 1024 * 1024
MAX_DIRECT_WRITES = 3   # per file, in flight on the write pool
MAX_DIRECT_BUFFERS = 64  # in use at once, all writers together (128 MiB)
_buffers: list = []
_buffers_lock = threading.Lock()
_buffers_free = threading.BoundedSemaphore(MAX_DIRECT_BUFFERS)
_direct_refused: set[int] = set()   # st_dev of file systems that refused O_DIRECT


def _take_buffer() -> mmap.mmap:
    """A page-aligned buffer for direct I/O (reused: its pages stay mapped and warm). Waits
    while MAX_DIRECT_BUFFERS are in use: a holder never waits for another buffer (it hands
    a full one to a write before it takes the next), and writes give theirs back when done."""
    _buffers_free.acquire()
    with _buffers_lock:
        if _buffers:
            return _buffers.pop()
    try:
        return mmap.mmap(-1, DIRECT_BUFFER)
    except BaseException:
        _buffers_free.release()
        raise


def _give_buffer(buf: mmap.mmap) -> None:
    with _buffers_lock:
        if len(_buffers) < 32:
            _buffers.append(buf)
            buf = None
    if buf is not None:
        try:
            buf.close()
        except BufferError:  # a view is still alive somewhere: let the collector close it
            pass
    _buffers_free.release()


class LargeFileWriter:
    """Stream one large body into a new file; ``finish`` (or ``sync``) makes it durable.

    By default the file is written under ``tmp/`` and renamed into ``final_dir/<xx>/`` by
    ``finish``. With ``in_place=True`` it is created at its final path at once (nothing refers
    to it before the index commit, so a partial file is never visible; unreferenced files left
    by a crash are removed by the orphan collector, :mod:`.compaction`) and ``sync`` needs no
    rename: one file fsync, then a directory fsync that is only a cache flush because the
    file's fsync already committed its directory entry (ext4, btrfs).

    In place, bytes go with ``O_DIRECT`` where the file system takes it: copied into a reused
    page-aligned buffer and written from there, which costs far less CPU than copying them
    into fresh page-cache pages (the largest cost of a buffered write here), and leaves the
    cache to data that is read. The tail below one block is padded and the file truncated to
    its size before the fsync. Given a ``pool``, the writes of a multi-block body run on it,
    a few at a time, so that the next block is hashed and copied while one goes to disk.
    """

    def __init__(self, root: str, final_dir: str, in_place: bool = False, pool=None):
        self.final_dir = final_dir
        self.pool = pool        # direct I/O: executor for writes overlapping the next block
        self.pending: collections.deque = collections.deque()
        self.offset = 0         # direct I/O: file offset of the next aligned write
        self.name = uuid.uuid4().hex
        self.in_place = in_place
        self.dir = os.path.join(final_dir, self.name[:2])
        self.path = os.path.join(self.dir, self.name)
        self.tmp_path = self.path if in_place else os.path.join(root, "tmp", self.name)
        self.fd: int | None = None
        self.direct = False
        self.tail = b""         # direct I/O: bytes past the last whole block, not yet written
        self.size = 0
        self.synced = False
        if not in_place:
            self._open()

    def _open(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            self.fd = os.open(self.tmp_path, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.tmp_path), exist_ok=True)
            self.fd = os.open(self.tmp_path, flags, 0o644)
        if self.in_place and hasattr(os, "O_DIRECT"):
            dev = os.fstat(self.fd).st_dev
            if dev not in _direct_refused:
                try:
                    fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) | os.O_DIRECT)
                    self.direct = True
                except OSError:  # tmpfs and friends
                    _direct_refused.add(dev)

    def write(self, data: bytes) -> None:
        """Append ``data`` (call from a worker thread)."""
        self.write_blocks([data])

    def write_blocks(self, blocks: list, final: bool = False) -> None:
        """Append every buffer of ``blocks`` with as few system calls as possible (``final``:
        nothing follows, so a direct write need not run in the background)."""
        if self.fd is None:
            self._open()
        if self.direct:
            self._write_direct(blocks, final)
            return
        if len(blocks) > 64:  # many tiny buffers: one join beats an iovec list near IOV_MAX
            blocks = [b"".join(blocks)]
        want = sum(len(b) for b in blocks)
        done = os.writev(self.fd, blocks) if blocks else 0
        if done < want:  # a short write: finish the rest block by block
            for b in blocks:
                if done >= len(b):
                    done -= len(b)
                    continue
                view = memoryview(b)[done:]
                done = 0
                while view:
                    view = view[os.write(self.fd, view):]
        self.size += want

    def _write_direct(self, blocks: list, final: bool, pad: bool = False) -> None:
        buf = _take_buffer()
        try:
            fill = len(self.tail)
            buf[:fill] = self.tail
            for b in blocks:
                view = memoryview(b)
                self.size += len(view)
                while view:
                    take = min(len(view), DIRECT_BUFFER - fill)
                    buf[fill:fill + take] = view[:take]
                    fill += take
                    view = view[take:]
                    if fill == DIRECT_BUFFER:
                        full, buf = buf, None
                        self._submit(full, DIRECT_BUFFER, final)
                        buf, fill = _take_buffer(), 0
            whole = fill - fill % DIRECT_ALIGN
            if pad and whole < fill:  # the last block: padded here, truncated by sync()
                whole += DIRECT_ALIGN
                buf[fill:whole] = bytes(whole - fill)
            self.tail = buf[whole:fill] if whole < fill else b""
            if whole:
                full, buf = buf, None
                self._submit(full, whole, final)
        finally:
            if buf is not None:
                _give_buffer(buf)

    def _submit(self, buf: mmap.mmap, length: int, now: bool) -> None:
        """Write ``buf[:length]`` at the next offset (the buffer goes back to the pool after):
        at once when ``now`` (the caller waits for the end anyway), else on the write pool, so
        that the next block is hashed and copied while this one goes to the device (a direct
        write returns only once it is there)."""
        offset = self.offset
        self.offset += length
        if now or self.pool is None:
            self._pwrite_at(buf, length, offset)
            return
        try:
            self.pending.append(self.pool.submit(self._pwrite_at, buf, length, offset))
        except BaseException:
            _give_buffer(buf)
            raise
        while len(self.pending) > MAX_DIRECT_WRITES:
            self.pending.popleft().result()

    def _pwrite_at(self, buf: mmap.mmap, length: int, offset: int) -> None:
        view = memoryview(buf)[:length]
        try:
            while view:
                n = os.pwrite(self.fd, view, offset)
                if n % DIRECT_ALIGN and len(view) > n:
                    raise OSError(f"short unaligned direct write ({n} bytes) to {self.tmp_path}")
                view = view[n:]
                offset += n
        finally:
            view.release()
            _give_buffer(buf)

    def _wait_writes(self) -> None:
        """Wait for every write in flight; raise the first failure."""
        error = None
        while self.pending:
            try:
                self.pending.popleft().result()
            except BaseException as exc:  # noqa: BLE001 - re-raised below once all ended
                error = error or exc
        if error is not None:
            raise error

    def sync(self) -> None:
        """Make the bytes and the file's name durable (in place: no rename)."""
        if self.fd is None:
            self._open()
        self._wait_writes()
        if self.direct and self.tail:
            self._write_direct([], True, pad=True)
        if self.direct and self.offset != self.size:
            os.ftruncate(self.fd, self.size)
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        if self.in_place:
            fsync_dir(self.dir)
        self.synced = True

    def finish(self) -> str:
        """fsync, move into ``final_dir`` unless written in place, fsync the directory; the final path."""
        if not self.synced:
            if self.in_place:
                self.sync()
            else:
                os.fsync(self.fd)
                os.close(self.fd)
                self.fd = None
                os.makedirs(self.dir, exist_ok=True)
                os.replace(self.tmp_path, self.path)
                fsync_dir(self.dir)
                self.synced = True
        return self.path

    def abort(self) -> None:
        """Drop the partial (or unreferenced) file."""
        try:
            try:
                self._wait_writes()
            except OSError:
                pass
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
        finally:
            try:
                os.unlink(self.path if self.synced else self.tmp_path)
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


def read_pieces(pieces: list[tuple[str, int, int]]) -> bytes:
    """The bytes of ``pieces``, opened and read at once (blocking; for a block or so)."""
    handles = open_pieces(pieces)
    try:
        return b"".join(read_open_pieces(handles))
    finally:
        for fh, _, _ in handles:
            fh.close()


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
