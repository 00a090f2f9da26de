"""A bucket's index in RADOS omap: N shard objects ``<bucket-id>.index.<n>``, a key in shard
``crc32(key) % N`` (as :mod:`.index` does with SQLite files).

Omap keys of a shard object:

- ``c/<key>``: the current version's record (a delete marker too), JSON;
- ``v/<esc key>\\x01<inverted seq>``: every version's record, newest first within a key;
- ``d/<esc key>\\x01<inverted seq>``: the bytes of a small version stored inline (not in the
  record, so that a listing of ``c/`` never reads them).

Every change of one key (a new version, the latest moved, a delete marker, a version removed)
is one write op on one object, guarded by ``omap_cmp`` of ``c/<key>`` against the value read
before it (an absent key compares equal to ""): a concurrent change on any gateway makes the
op fail with ECANCELED, and the change is read and decided again. So ``If-None-Match: *`` and
``If-Match`` have exactly one winner across every gateway of the pool, and an op is atomic and
durable once the OSDs acknowledge it (no group commit, no compaction).

Omap keys sort as bytes, and S3 orders keys by their UTF-8 bytes, so ``c/<key>`` lists in S3
order as it is. In ``v/`` and ``d/`` the key is followed by ``\\x01`` and 20 digits: a key's
versions sort right after the key and before any longer key (librados takes omap keys as C
strings, and S3 keys hold no ``\\0``); ``\\x01`` in a key itself is written ``\\x01\\x7f``
(:func:`esc`), above the separator's ``\\x01<digit>`` and below every other byte a key holds,
so that any two keys' versions sort as the keys do, and ``v/<esc key>\\x01`` followed by a digit names one key's
versions only. A key without ``\\x01`` is written as it is. Usage is summed over the versions
when asked (a quota set, the admin interface): no counters yet.
"""
from __future__ import annotations

import dataclasses
import errno
import json
import time
import zlib
from typing import Iterator

import rados

from .index import MergedCursor, Op, OpResult, Record

SEP = "\x01"
ESC = "\x01\x7f"    # \x01 in a key (see the module's docstring)
# after any key (of at most 1024 bytes, the gateway's limit) that starts with a given prefix:
# the prefix and this (omap keys are given as text, so the highest character, not a 0xff byte)
PAST = "\U0010ffff" * (1024 // 4 + 1)
MAX_SEQ = (1 << 64) - 1
PAGE = 500
RETRIES = 200
# set on every shard (a token: "<time> <id>") while a DeleteBucket decides: every index op
# compares it with "" in its own write op, so none lands from then on (see
# :meth:`.rados_buckets.RadosBucketStore.delete`); a mark older than STALE_MARK seconds was
# left by a gateway that died deleting, and the next op takes it away
DELETING = "!deleting"
STALE_MARK = 60
WAIT = object()


class BucketGone(Exception):
    """The bucket's index shards are gone: some gateway deleted the bucket."""


def inv(seq: int) -> str:
    return f"{MAX_SEQ - seq:020d}"


def esc(key: str) -> str:
    """``key`` as it is written in a ``v/`` or ``d/`` omap key."""
    return key.replace(SEP, ESC)


def vkey(key: str, seq: int) -> str:
    return f"v/{esc(key)}{SEP}{inv(seq)}"


def dkey(key: str, seq: int) -> str:
    return f"d/{esc(key)}{SEP}{inv(seq)}"


def dump(rec: Record) -> str:
    d = dataclasses.asdict(rec)
    d.pop("latest")
    return json.dumps(d, separators=(",", ":"))


def load(raw: bytes | str, latest: bool) -> Record:
    return Record(latest=latest, **json.loads(raw))


def inline(rec: Record) -> bool:
    return bool(rec.loc.get("i"))


class RadosIndex:
    """Every version of one bucket's keys, in ``shards`` omap objects of ``ioctx``."""

    def __init__(self, ioctx, bucket_id: str, shards: int):
        self.io, self.bid, self.shards = ioctx, bucket_id, shards

    def oid(self, n: int) -> str:
        return f"{self.bid}.index.{n}"

    def shard_oid(self, key: str) -> str:
        return self.oid(zlib.crc32(key.encode()) % self.shards)

    def create(self) -> None:
        """Make the shard objects (``omap_cmp`` needs its object to exist)."""
        for n in range(self.shards):
            self.io.write_full(self.oid(n), b"")

    def destroy(self) -> None:
        for n in range(self.shards):
            try:
                self.io.remove_object(self.oid(n))
            except rados.ObjectNotFound:
                pass

    # -- reading ----------------------------------------------------------------------------

    def _by_keys(self, oid: str, keys: list[str]) -> dict[str, bytes]:
        with rados.ReadOpCtx() as op:
            it, _ = self.io.get_omap_vals_by_keys(op, tuple(keys))
            self.io.operate_read_op(op, oid)
            return dict(it)

    def _scan(self, oid: str, start_after: str, prefix: str, n: int) -> list[tuple[str, bytes]]:
        with rados.ReadOpCtx() as op:
            it, _ = self.io.get_omap_vals(op, start_after, prefix, n)
            self.io.operate_read_op(op, oid)
            return list(it)

    def _versions_raw(self, key: str) -> list[tuple[str, bytes]]:
        """(omap key, record) of every version of ``key``, newest first."""
        oid, prefix, out, after = self.shard_oid(key), f"v/{esc(key)}{SEP}", [], ""
        while True:
            page = self._scan(oid, after, prefix, PAGE)
            mine = [(k, v) for k, v in page if k[len(prefix)].isdigit()]   # not key + "\x01..."
            out += mine
            if len(page) < PAGE or len(mine) < len(page):
                return out
            after = page[-1][0]

    def get(self, key: str, version_id: str | None = None) -> Record | None:
        """The current version of ``key`` (a delete marker too), or version ``version_id``."""
        if version_id is None:
            raw = self._by_keys(self.shard_oid(key), [f"c/{key}"]).get(f"c/{key}")
            return load(raw, True) if raw else None
        for rec in self.versions_of(key):
            if rec.version_id == version_id:
                return rec
        return None

    def versions_of(self, key: str) -> list[Record]:
        """Every version of one key, newest first."""
        return [load(raw, i == 0) for i, (_, raw) in enumerate(self._versions_raw(key))]

    def inline_data(self, rec: Record) -> bytes:
        raw = self._by_keys(self.shard_oid(rec.key), [dkey(rec.key, rec.seq)]).get(dkey(rec.key, rec.seq))
        if raw is None:
            raise FileNotFoundError(f"{rec.key}: inline bytes of version {rec.version_id}")
        return raw

    def iter_current(self, prefix: str = "", after: str = "", expect: int | None = None) -> MergedCursor:
        """Current (non-deleted) objects with ``prefix``, key > ``after``, in key order."""
        return _Merged([_OmapCursor(self, n, prefix, False) for n in range(self.shards)], after, None)

    def iter_versions(self, prefix: str = "", after: str = "", after_seq: int | None = None,
                      expect: int | None = None) -> MergedCursor:
        """Every version (newest first within a key) with ``prefix``, after (``after``, ``after_seq``)."""
        return _Merged([_OmapCursor(self, n, prefix, True) for n in range(self.shards)], after, after_seq)

    def is_empty(self) -> bool:
        return all(not self._scan(self.oid(n), "", "v/", 1) for n in range(self.shards))

    def usage(self) -> tuple[int, int]:
        """(bytes, objects) over every stored version (delete markers count no bytes)."""
        size = count = 0
        for rec in self.iter_versions():
            if not rec.marker:
                size, count = size + rec.size, count + 1
        return size, count

    # -- writing ----------------------------------------------------------------------------

    def apply(self, op: Op, data: bytes | None = None) -> OpResult:
        """Apply one op atomically against whatever any gateway wrote meanwhile (retried while
        another change of the same key got in between the read and the write)."""
        tries = 0
        while tries < RETRIES:
            try:
                result = self._try(op, data)
            except rados.ObjectNotFound:
                raise BucketGone(self.bid) from None
            if result is WAIT:   # a DeleteBucket is deciding: it goes (BucketGone next) or not
                time.sleep(0.02)
            elif result is not None:
                return result
            else:
                tries += 1
        raise RuntimeError(f"index: {op.kind} of {op.key or op.record.key} kept losing to concurrent changes")

    def _try(self, op: Op, data: bytes | None) -> OpResult | None:
        key = op.record.key if op.kind == "put" else op.key
        oid = self.shard_oid(key)
        vals = self._by_keys(oid, [f"c/{key}", DELETING])
        if vals.get(DELETING):
            mark = vals[DELETING]
            if time.time() - float(mark.split()[0]) < STALE_MARK:
                return WAIT
            clear_mark(self.io, oid, mark)
        current = vals.get(f"c/{key}", b"")
        cur = load(current, True) if current else None
        sets: dict[str, bytes] = {}
        drops: list[str] = []
        result = OpResult()
        if op.kind == "put":
            exists = cur is not None and not cur.marker
            if op.if_none_match and exists:
                return OpResult(precondition="failed")
            if op.if_match is not None:
                if not exists:
                    return OpResult(precondition="conflict")
                if cur.etag != op.if_match:
                    return OpResult(precondition="failed")
            rec = op.record
            if cur is not None and rec.seq <= cur.seq:   # another node's clock is ahead: stay newest
                rec.seq = cur.seq + 1
                if rec.version_id != "null":
                    rec.version_id = f"{rec.seq:019d}.{rec.version_id.partition('.')[2]}"
            if not op.versioned:  # the null version (if any) is replaced
                for vk, raw in self._versions_raw(key):
                    old = load(raw, False)
                    if old.version_id == "null":
                        drops += [vk] + ([dkey(key, old.seq)] if inline(old) else [])
                        result.removed.append(old)
            sets[f"c/{key}"] = dump(rec).encode()
            sets[vkey(key, rec.seq)] = sets[f"c/{key}"]
            if data is not None:
                sets[dkey(key, rec.seq)] = data
        elif op.kind == "delete_version":
            versions = self._versions_raw(key)
            found = [(i, vk, load(raw, i == 0)) for i, (vk, raw) in enumerate(versions)
                     if json.loads(raw)["version_id"] == op.version_id]
            if not found:
                return OpResult(found=False)
            i, vk, old = found[0]
            drops += [vk] + ([dkey(key, old.seq)] if inline(old) else [])
            result.removed.append(old)
            if i == 0:  # the latest goes: the next newest becomes current
                rest = [raw for j, (_, raw) in enumerate(versions) if j != i]
                if rest:
                    sets[f"c/{key}"] = rest[0]
                else:
                    drops.append(f"c/{key}")
        elif op.kind == "set_meta":
            versions = self._versions_raw(key)
            for i, (vk, raw) in enumerate(versions):
                old = load(raw, i == 0)
                if old.version_id == op.version_id:
                    old.meta = op.meta
                    sets[vk] = dump(old).encode()
                    if i == 0:
                        sets[f"c/{key}"] = sets[vk]
                    break
            else:
                return OpResult(found=False)
        else:
            raise ValueError(f"the RADOS index does not do {op.kind!r}")
        with rados.WriteOpCtx() as wop:
            wop.omap_cmp(DELETING, "", rados.LIBRADOS_CMPXATTR_OP_EQ)
            wop.omap_cmp(f"c/{key}", current.decode(), rados.LIBRADOS_CMPXATTR_OP_EQ)
            if drops:
                self.io.remove_omap_keys(wop, tuple(drops))
            if sets:
                self.io.set_omap(wop, tuple(sets), tuple(sets.values()))
            try:
                self.io.operate_write_op(wop, oid)
            except rados.Error as exc:
                if getattr(exc, "errno", None) == errno.ECANCELED:
                    return None
                raise
        return result


def clear_mark(io, oid: str, mark: bytes) -> None:
    """Take DeleteBucket's mark ``mark`` off shard ``oid`` (if it is still that one)."""
    with rados.WriteOpCtx() as wop:
        wop.omap_cmp(DELETING, mark.decode(), rados.LIBRADOS_CMPXATTR_OP_EQ)
        io.remove_omap_keys(wop, (DELETING,))
        try:
            io.operate_write_op(wop, oid)
        except rados.Error as exc:   # changed or gone meanwhile: nothing of ours to clear
            if getattr(exc, "errno", None) not in (errno.ECANCELED, errno.ENOENT):
                raise


class _OmapCursor:
    """One shard's ``c/`` or ``v/`` entries in key order, a page at a time (the interface of
    :class:`.index._ShardCursor`, so :class:`.index.MergedCursor` merges them)."""

    def __init__(self, index: RadosIndex, n: int, prefix: str, versions: bool):
        self.index, self.oid = index, index.oid(n)
        self.ns = "v/" if versions else "c/"
        self.prefix, self.versions = (esc(prefix) if versions else prefix), versions
        self.buf: list[tuple[str, bytes]] = []
        self.pos = 0
        self.head: Record | None = None
        self.exhausted = True
        self.last_key = None   # the key of the previous entry taken (for `latest` of versions)

    def _load(self, start_after: str) -> None:
        self.buf = self.index._scan(self.oid, start_after, self.ns + self.prefix, PAGE)
        self.pos, self.head = 0, None
        self.exhausted = len(self.buf) < PAGE

    def seek_after(self, after: str, after_seq: int | None = None) -> None:
        if not after:
            self._load("")
        elif after_seq is not None:
            self._load(vkey(after, after_seq))
        else:   # past the key's versions ("\x01" and digits), not past longer keys ("\x01\x7f...")
            self._load(f"v/{esc(after)}{ESC}" if self.versions else f"c/{after}")

    def seek_past(self, prefix: str) -> None:
        """Position after every key starting with ``prefix``."""
        self._load(f"{self.ns}{esc(prefix) if self.versions else prefix}{PAST}")
        self.last_key = None

    def peek(self) -> Record | None:
        while self.head is None:
            if self.pos >= len(self.buf):
                if self.exhausted:
                    return None
                self._load(self.buf[-1][0])
                continue
            name, raw = self.buf[self.pos]
            rec = json.loads(raw)
            if not self.versions and rec["marker"]:
                self.pos += 1
                continue
            key = rec["key"]
            if self.versions:
                first = self.last_key != key and self._is_newest(name, key)
            else:
                first = True
            self.head = Record(latest=first, **rec)
        return self.head

    def _is_newest(self, name: str, key: str) -> bool:
        """Whether entry ``name`` is the newest version of ``key`` (the previous entry of this
        cursor had another key; after a jump the current record says)."""
        if self.pos > 0 and json.loads(self.buf[self.pos - 1][1])["key"] != key:
            return True
        cur = self.index._by_keys(self.oid, [f"c/{key}"]).get(f"c/{key}")
        return cur is not None and json.loads(cur)["seq"] == json.loads(self.buf[self.pos][1])["seq"]

    def advance(self) -> None:
        if self.head is not None:
            self.last_key = self.head.key
        self.pos += 1
        self.head = None


class _Merged(MergedCursor):
    """:class:`.index.MergedCursor` over omap cursors."""

    def __init__(self, cursors: list[_OmapCursor], after: str, after_seq: int | None):
        self.cursors = cursors
        for c in cursors:
            c.seek_after(after, after_seq)

    def __iter__(self) -> Iterator[Record]:
        return self

    def skip_past(self, prefix: str) -> None:
        for c in self.cursors:
            rec = c.peek()
            if rec is not None and rec.key.startswith(prefix):
                c.seek_past(prefix)
