"""Reading encrypted versions: where each piece's packages are stored (a segment, a part's
file, a cold copy joining the parts, or a RADOS store's stream of data objects joining them),
which packages a byte range overlaps, and the plaintext stream of that range (every byte
returned authenticated)."""
from __future__ import annotations

import os
from typing import AsyncIterator, Callable, Iterator

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .cipher import CHUNK, PACKAGE, TAG, open_packages, stored_size
from .customer import CustomerKey
from .data_keys import data_key
from .keys import unb64

READ_PACKAGES = 16          # about 1 MiB of ciphertext per read


def physical_size(rec) -> int:
    """Bytes the version's data takes on disk (its ciphertext when encrypted)."""
    if "sse" not in rec.meta:
        return rec.size
    sizes = _part_sizes(rec.loc)
    return sum(stored_size(s) for s in sizes) if sizes is not None else stored_size(rec.size)


def physical_ranges(rec, loc: dict, segment_dir: str) -> list[tuple[str, int, int]]:
    """(path, offset, length) of every stored byte of an encrypted version at ``loc``."""
    return [(path, off, stored_size(plain)) for path, off, plain, _ in _pieces(rec, loc, segment_dir)]


def _part_sizes(loc: dict) -> list[int] | None:
    if "parts" in loc:
        return [s for _, s in loc["parts"]]
    return loc.get("psizes")


def _pieces(rec, loc: dict, segment_dir: str) -> list[tuple[str, int, int, bytes]]:
    """(path, offset of its first package, plaintext size, nonce prefix) per piece."""
    info = rec.meta["sse"]
    nps = [unb64(n) for n in info["nps"]] if "nps" in info else [unb64(info["np"])]
    if "seg" in loc:
        return [(os.path.join(segment_dir, f"{loc['seg']:08d}.seg"), loc["off"], rec.size, nps[0])]
    if "parts" in loc:
        return [(path, 0, size, np) for (path, size), np in zip(loc["parts"], nps)]
    sizes = _part_sizes(rec.loc) or [rec.size]   # a cold copy (or a RADOS stream) joins the parts
    out, off = [], 0
    for size, np in zip(sizes, nps):
        out.append((loc["file"], off, size, np))
        off += stored_size(size)
    return out


def _plan(pieces, start: int, end: int) -> list[tuple[int, int, int, int, int, bytes]]:
    """Per overlapped piece: (piece index, first package, package count, bytes to skip in the
    first package, bytes wanted, nonce prefix)."""
    plan, base = [], 0
    for i, (_path, _off, size, np) in enumerate(pieces):
        lo, hi = max(start, base), min(end, base + size)
        if lo < hi:
            a, b = lo - base, hi - base
            first = a // CHUNK
            count = (b - 1) // CHUNK + 1 - first
            plan.append((i, first, count, a - first * CHUNK, b - a, np))
        base += size
    return plan


def read_plain(pread: Callable[[int, int, int], bytes], pieces, plan, dek: bytes) -> Iterator[bytes]:
    """Plaintext of ``plan`` (blocking), about 1 MiB at a time; ``pread(piece index, length,
    offset)`` reads stored bytes of a piece."""
    aes = AESGCM(dek)
    for i, first, count, skip, want, np in plan:
        path, off, size, _ = pieces[i]
        done = 0
        while done < count:
            n = min(READ_PACKAGES, count - done)
            pkg = first + done
            length = min((pkg + n) * CHUNK, size) - pkg * CHUNK + n * TAG
            data = pread(i, length, off + pkg * PACKAGE)
            if len(data) != length:
                raise IOError(f"{path} is shorter than the index says; run a scrub")
            plain = b"".join(open_packages(aes, np, pkg, data, path))
            if skip:
                plain, skip = plain[skip:], 0
            if len(plain) > want:
                plain = plain[:want]
            want -= len(plain)
            done += n
            if plain:
                yield plain


async def open_decrypting(gw, rec, loc: dict, start: int, end: int, ckey: CustomerKey | None) -> AsyncIterator[bytes]:
    """Open an encrypted version's files now and stream plaintext [start, end)."""
    dek = data_key(gw.keyring, rec.meta["sse"], ckey)
    pieces = _pieces(rec, loc, gw.segments.dir)
    plan = _plan(pieces, start, end)
    if "seg" in loc:  # small: inline, as plaintext segment reads are
        with open(pieces[0][0], "rb", buffering=0) as fh:
            data = b"".join(read_plain(_file_pread([fh]), pieces, plan, dek))
        return _once(data)

    def open_all():
        handles = {}
        try:
            for i, *_ in plan:
                handles[i] = open(pieces[i][0], "rb", buffering=0)
        except BaseException:
            for fh in handles.values():
                fh.close()
            raise
        return handles

    handles = await gw.run(open_all)
    return gw.stream_blocks(read_plain(_file_pread(handles), pieces, plan, dek), list(handles.values()))


def _file_pread(handles) -> Callable[[int, int, int], bytes]:
    return lambda i, length, offset: os.pread(handles[i].fileno(), length, offset)


def read_stream(rec, start: int, end: int, dek: bytes, pread: Callable[[int, int], bytes],
                where: str) -> Iterator[bytes]:
    """Plaintext [start, end) of an encrypted version whose pieces are stored end to end in
    one stream (a RADOS store's data objects, or its inline bytes): ``pread(length, offset)``
    reads that stream (blocking), ``where`` names it in errors."""
    pieces = _pieces(rec, {"file": where}, "")
    return read_plain(lambda _i, length, offset: pread(length, offset), pieces, _plan(pieces, start, end), dek)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
