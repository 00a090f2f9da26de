"""Object bytes in RADOS: a body of at least INLINE_LIMIT goes into data objects
``<bucket-id>.d.<uuid>.<n>`` of at most CHUNK bytes, each written whole (``write_full``)
before the index entry that names them (a crash leaves data no entry names, never an entry
without data); smaller bodies go inline into the index op (:mod:`.rados_index`).

A location (``Record.loc``) is ``{"i": 1}`` (inline) or ``{"r": [[object, size], ...]}``, the
pieces in order (a multipart object's are its parts' pieces, end to end).
"""
from __future__ import annotations

import uuid

import rados

INLINE_LIMIT = 64 * 1024
CHUNK = 4 * 1024 * 1024
READ = 1024 * 1024


class ChunkWriter:
    """Write a stream of blocks into data objects of CHUNK bytes (blocking calls: run them on
    a worker thread); ``pieces`` is the location's list once ``finish`` returned."""

    def __init__(self, ioctx, bucket_id: str):
        self.io = ioctx
        self.base = f"{bucket_id}.d.{uuid.uuid4().hex}"
        self.pieces: list[list] = []
        self.blocks: list = []    # received, not yet written: joined once per data object
        self.held = 0

    def write(self, blocks: list[bytes]) -> None:
        self.blocks += blocks
        self.held += sum(len(b) for b in blocks)
        if self.held >= CHUNK:
            data = b"".join(self.blocks)
            view = memoryview(data)
            whole = len(data) - len(data) % CHUNK
            for off in range(0, whole, CHUNK):
                self._flush(view[off:off + CHUNK])
            self.blocks = [view[whole:]] if whole < len(data) else []
            self.held = len(data) - whole

    def finish(self) -> dict:
        if self.held or not self.pieces:
            self._flush(b"".join(self.blocks))
            self.blocks, self.held = [], 0
        return {"r": self.pieces}

    def _flush(self, data) -> None:
        name = f"{self.base}.{len(self.pieces)}"
        self.io.write_full(name, bytes(data) if isinstance(data, memoryview) else data)
        self.pieces.append([name, len(data)])

    def abort(self) -> None:
        remove(self.io, {"r": self.pieces})


def remove(ioctx, loc: dict) -> None:
    """Delete a location's data objects (those already gone are skipped)."""
    for name, _ in loc.get("r", []):
        try:
            ioctx.remove_object(name)
        except rados.ObjectNotFound:
            pass


def ranges(loc: dict, start: int, end: int) -> list[tuple[str, int, int]]:
    """(object, offset, length) covering bytes [start, end) of a location."""
    out, pos = [], 0
    for name, size in loc["r"]:
        lo, hi = max(start, pos), min(end, pos + size)
        if lo < hi:
            out.append((name, lo - pos, hi - lo))
        pos += size
        if pos >= end:
            break
    return out


def read_blocks(ioctx, pieces: list[tuple[str, int, int]]):
    """The bytes of ``pieces``, READ at a time (blocking: one call per block)."""
    for name, off, length in pieces:
        while length > 0:
            n = min(READ, length)
            try:
                data = ioctx.read(name, n, off)
            except rados.ObjectNotFound:
                raise FileNotFoundError(name) from None
            if len(data) != n:
                raise IOError(f"{name}: {len(data)} bytes at {off}, {n} expected")
            yield data
            off, length = off + n, length - n


def omap_vals(io, oid: str, keys=None, prefix: str = "", after: str = "") -> dict[str, bytes]:
    """Omap values of ``oid``: those of ``keys``, or every one with ``prefix`` after ``after``
    (read a page at a time; none if the object is gone)."""
    out: dict[str, bytes] = {}
    while True:
        with rados.ReadOpCtx() as op:
            if keys is not None:
                it, _ = io.get_omap_vals_by_keys(op, tuple(keys))
            else:
                it, _ = io.get_omap_vals(op, after, prefix, 1000)
            try:
                io.operate_read_op(op, oid)
            except rados.ObjectNotFound:
                return out
            page = list(it)
        out.update(page)
        if keys is not None or len(page) < 1000:
            return out
        after = page[-1][0]
