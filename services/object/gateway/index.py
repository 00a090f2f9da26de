"""The bucket index: several SQLite (WAL) shards per bucket, merged in key order for listings.

A key always lives in shard ``crc32(key) % shards``, so concurrent writers to different keys
spread over independent databases (and independent write locks). Each shard holds every
version of its keys; ``latest`` marks the version a plain GET sees. Writes arrive as batches
from the group committer (:mod:`.commit`), one transaction per shard per batch, with
``synchronous=FULL`` so an acknowledged PUT survives power loss. Each shard also keeps its
usage (bytes and objects of every stored version) in a one-row table, changed in the same
transaction, so every process serving the bucket reads the same figures.

Several worker processes may write one shard (:mod:`.workers`): an ``flock`` on
``shard-NN.db.lock`` (a waiter wakes as soon as it is free), then SQLite's own lock (``BEGIN
IMMEDIATE``, up to 30 s) serialise their transactions, a conditional put
is checked inside its transaction (so If-None-Match is atomic across processes), and what a
transaction committed is what the next read of any process sees (WAL). No row is cached.

Each shard's WAL index (``-shm``, memory-mapped by SQLite) is made NOCOW before SQLite makes
it: on btrfs a full pool cannot copy a page of a copy-on-write mapping, and the kernel then
kills the gateway with SIGBUS on its next read; written in place, it keeps serving reads
while writes fail cleanly (InsufficientStorage).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import sqlite3
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterator

import orjson

from .shared import set_nocow

SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (
    key TEXT NOT NULL,
    seq INTEGER NOT NULL,
    version_id TEXT NOT NULL,
    latest INTEGER NOT NULL,
    marker INTEGER NOT NULL,
    size INTEGER NOT NULL,
    etag TEXT NOT NULL,
    mtime REAL NOT NULL,
    tier TEXT NOT NULL,
    loc TEXT NOT NULL,
    meta TEXT NOT NULL,
    PRIMARY KEY (key, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS current ON versions(key) WHERE latest = 1 AND marker = 0;
CREATE UNIQUE INDEX IF NOT EXISTS by_version ON versions(key, version_id);
CREATE INDEX IF NOT EXISTS cold ON versions(key) WHERE tier != 'hot';
CREATE INDEX IF NOT EXISTS by_segment ON versions(json_extract(loc, '$.seg'))
    WHERE json_extract(loc, '$.seg') IS NOT NULL;
CREATE INDEX IF NOT EXISTS by_seq ON versions(seq);
CREATE TABLE IF NOT EXISTS usage (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    bytes INTEGER NOT NULL,
    objects INTEGER NOT NULL
);
"""


def shards_for_workers(workers: int) -> int:
    """The index shards of a new bucket for a gateway of ``workers`` processes: one per two
    workers, at least one (an existing bucket keeps the number it has on disk; the config may
    set another, ``index_shards``).

    Each shard a batch touches costs one transaction (its pages written to the WAL) and one WAL
    fsync in every group commit: with 8 shards, a batch of ~12 small PUTs paid ~8 fsyncs and
    ~0.4 ms of committer CPU per PUT; with 2, ~3 fsyncs and ~0.2 ms. More shards let more worker
    processes commit at once. With 2 workers on 2 cores (5 alternating runs of 4 x 3,000 PUTs
    from s5cmd), one shard took 0.37-0.40 ms of CPU per 4 KiB PUT and two 0.40-0.41 ms, and
    served 4-6% more PUTs a second: both committers' batches are small, and while one holds
    the shard's lock the other's batch grows."""
    return max(1, workers // 2)


@dataclass
class Record:
    """One version of one key, as stored in a shard."""

    key: str
    seq: int
    version_id: str
    latest: bool
    marker: bool
    size: int
    etag: str
    mtime: float
    tier: str = "hot"
    loc: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_row(cls, row) -> "Record":
        return cls(row[0], row[1], row[2], bool(row[3]), bool(row[4]), row[5], row[6], row[7],
                   row[8], _loads(row[9]), _loads(row[10]))

    def row(self) -> tuple:
        return (self.key, self.seq, self.version_id, int(self.latest), int(self.marker), self.size,
                self.etag, self.mtime, self.tier, json.dumps(self.loc), json.dumps(self.meta))


def _loads(text: str):
    """A row's JSON column: orjson reads it (8x json.loads on these small objects, and a
    listing decodes two a key); NaN or Infinity, which json.dumps writes and orjson refuses,
    are read by json. (No column holds an integer past 64 bits, which orjson would read as a
    float: sizes, offsets, nanosecond sequence numbers.) Rows are still written by json.dumps:
    relocate and retier match a row by the exact text of its location."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


COLUMNS = "key, seq, version_id, latest, marker, size, etag, mtime, tier, loc, meta"


@dataclass
class Op:
    """An index change for one key: ``put`` a version, or ``delete`` one version by id."""

    kind: str                      # "put" | "delete_version" | "set_meta" | "relocate" | "retier"
    record: Record | None = None   # for put
    versioned: bool = False        # bucket versioning Enabled (keep older versions)
    key: str = ""
    version_id: str = ""           # for delete_version and set_meta
    meta: dict | None = None       # for set_meta (replaces the version's metadata)
    seq: int = 0                   # for relocate: the version whose bytes moved
    old_loc: dict | None = None    # for relocate: only if the version still points here
    new_loc: dict | None = None
    tier: str = ""                 # for retier: the version's new tier ...
    storage_class: str = ""        # ... and S3 storage class (meta "sc"), with relocate's CAS
    if_none_match: bool = False    # for put: only if the key has no current object ...
    if_match: str | None = None    # ... or only if the current object has this ETag


@dataclass
class OpResult:
    """What an applied op replaced (for garbage collection and usage accounting)."""

    removed: list[Record] = field(default_factory=list)
    bytes_delta: int = 0
    objects_delta: int = 0
    found: bool = True
    precondition: str = ""         # a conditional put not applied: "failed" or "conflict"


def prepare_shm(db_path: str) -> None:
    """Create ``<db>-shm`` empty and NOCOW when it does not exist yet (SQLite then uses it);
    a file system without the flag (not btrfs) keeps an ordinary file."""
    shm = db_path + "-shm"
    try:
        fd = os.open(shm, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    try:
        set_nocow(fd)
    finally:
        os.close(fd)


class _OpenShards:
    """The shards of this process that hold open files (SQLite connections, the flock file),
    least recently used first. Past :meth:`limit` the oldest are closed until used again, so
    that a gateway with thousands of buckets stays within its file descriptors (each open
    shard holds about eight)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._lru: OrderedDict[Shard, None] = OrderedDict()
        self._limit = 0

    def limit(self) -> int:
        if not self._limit:  # read late: the gateway raises its own limit when it starts
            self._limit = max(16, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 20)
        return self._limit

    def touch(self, shard: "Shard") -> None:
        """``shard`` is being used: it becomes the newest; the oldest beyond the limit close."""
        victims = []
        with self._lock:
            self._lru[shard] = None
            self._lru.move_to_end(shard)
            while len(self._lru) > self.limit():
                victims.append(self._lru.popitem(last=False)[0])
        for victim in victims:
            victim.release()

    def forget(self, shard: "Shard") -> None:
        with self._lock:
            self._lru.pop(shard, None)


OPEN_SHARDS = _OpenShards()


class Shard:
    """One SQLite database of the index; writes come only from the committer thread. Its
    files are opened on use and may be closed while idle (:data:`OPEN_SHARDS`)."""

    MAX_IDLE_READERS = 2

    def __init__(self, path: str):
        self.path = path
        self.write_lock = threading.Lock()
        self._flock_fd: int | None = None
        self._writer: sqlite3.Connection | None = None
        self._pool_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        prepare_shm(path)
        with self.writing():
            db = self._writer
            db.executescript(SCHEMA)
            db.execute("BEGIN IMMEDIATE")
            try:  # a shard from before the usage table (or a new one): count it once
                db.execute("INSERT OR IGNORE INTO usage SELECT 0, COALESCE(SUM(size),0), COUNT(*) "
                           "FROM versions WHERE marker=0")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    def query(self, sql: str, args=()) -> list:
        """All rows of a read query, on a pooled connection (a few per shard, whatever the
        number of threads, so that many buckets do not exhaust file descriptors)."""
        OPEN_SHARDS.touch(self)
        with self._pool_lock:
            db = self._idle.pop() if self._idle else None
        if db is None:
            db = self._connect()
        try:
            return db.execute(sql, args).fetchall()
        finally:
            with self._pool_lock:
                if len(self._idle) < self.MAX_IDLE_READERS:
                    self._idle.append(db)
                    db = None
            if db is not None:
                db.close()

    def release(self) -> None:
        """Close the files this shard is not using right now (they reopen on next use)."""
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()
        if self.write_lock.acquire(blocking=False):  # a writer busy now keeps its files
            try:
                self._close_writer()
            finally:
                self.write_lock.release()

    def _close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._flock_fd is not None:
            os.close(self._flock_fd)
            self._flock_fd = None

    def close(self) -> None:
        """Close every connection (the shard is being deleted)."""
        OPEN_SHARDS.forget(self)
        with self._pool_lock:
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()
        with self.write_lock:
            self._close_writer()

    @contextlib.contextmanager
    def writing(self):
        """Hold the shard's write lock, in this process and across processes; ``_writer`` is
        open while it is held."""
        OPEN_SHARDS.touch(self)
        with self.write_lock:
            if self._flock_fd is None:
                # writers of every process take this flock before SQLite's write lock: a waiter
                # wakes the moment it is free (SQLite's busy handler polls with 1-100 ms sleeps)
                self._flock_fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            if self._writer is None:
                self._writer = self._connect()
            fcntl.flock(self._flock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._flock_fd, fcntl.LOCK_UN)

    def apply(self, ops: list[Op]) -> list[OpResult]:
        """Apply ``ops`` in one durable transaction."""
        with self.writing():
            db = self._writer
            db.execute("BEGIN IMMEDIATE")
            try:
                if len(ops) > 1 and _plain_puts(ops):
                    results = self._apply_puts(db, ops)
                else:
                    results = [self._apply_one(db, op) for op in ops]
                added = sum(r.bytes_delta for r in results), sum(r.objects_delta for r in results)
                if any(added):
                    db.execute("UPDATE usage SET bytes=bytes+?, objects=objects+? WHERE id=0", added)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return results

    @staticmethod
    def _apply_puts(db, ops: list[Op]) -> list[OpResult]:
        """What :meth:`_apply_one` does for each of ``ops`` (unconditional puts of distinct
        keys), in three statements for all of them instead of four per op: each SQLite call
        hands the GIL over (to the event loop, and back after up to a switch interval)."""
        results = [OpResult() for _ in ops]
        by_key = {op.record.key: res for op, res in zip(ops, results)}
        unversioned = [op.record.key for op in ops if not op.versioned]
        for part in _chunks(unversioned, BULK):
            rows = db.execute(f"DELETE FROM versions WHERE version_id='null' AND key IN ({_marks(len(part))}) "
                              f"RETURNING {COLUMNS}", part).fetchall()
            for row in rows:
                old = Record.from_row(row)
                res = by_key[old.key]
                res.removed.append(old)
                if not old.marker:
                    res.bytes_delta -= old.size
                    res.objects_delta -= 1
        for part in _chunks(ops, BULK):
            keys = [op.record.key for op in part]
            db.execute(f"UPDATE versions SET latest=0 WHERE latest=1 AND key IN ({_marks(len(keys))})", keys)
            values = [v for op in part for v in op.record.row()]
            db.execute(f"INSERT INTO versions ({COLUMNS}) VALUES " + ",".join([ROW_MARKS] * len(part)), values)
        for op, res in zip(ops, results):
            if not op.record.marker:
                res.bytes_delta += op.record.size
                res.objects_delta += 1
        return results

    def _apply_one(self, db, op: Op) -> OpResult:
        res = OpResult()
        if op.kind == "put":
            rec = op.record
            if op.if_none_match or op.if_match is not None:
                res.precondition = _check_precondition(db, op)
                if res.precondition:
                    return res
            if not op.versioned:
                old = db.execute(f"SELECT {COLUMNS} FROM versions WHERE key=? AND version_id='null'",
                                 (rec.key,)).fetchone()
                if old is not None:
                    old = Record.from_row(old)
                    db.execute("DELETE FROM versions WHERE key=? AND seq=?", (old.key, old.seq))
                    res.removed.append(old)
                    if not old.marker:
                        res.bytes_delta -= old.size
                        res.objects_delta -= 1
            db.execute("UPDATE versions SET latest=0 WHERE key=? AND latest=1", (rec.key,))
            db.execute(f"INSERT INTO versions ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rec.row())
            if not rec.marker:
                res.bytes_delta += rec.size
                res.objects_delta += 1
            return res
        if op.kind == "delete_version":
            old = db.execute(f"SELECT {COLUMNS} FROM versions WHERE key=? AND version_id=?",
                             (op.key, op.version_id)).fetchone()
            if old is None:
                res.found = False
                return res
            old = Record.from_row(old)
            db.execute("DELETE FROM versions WHERE key=? AND seq=?", (old.key, old.seq))
            res.removed.append(old)
            if not old.marker:
                res.bytes_delta -= old.size
                res.objects_delta -= 1
            if old.latest:
                db.execute("UPDATE versions SET latest=1 WHERE key=? AND seq=(SELECT MAX(seq) FROM versions WHERE key=?)",
                           (op.key, op.key))
            return res
        if op.kind == "set_meta":
            cur = db.execute("UPDATE versions SET meta=? WHERE key=? AND version_id=?",
                             (json.dumps(op.meta), op.key, op.version_id))
            res.found = cur.rowcount > 0
            return res
        if op.kind == "relocate":
            cur = db.execute("UPDATE versions SET loc=? WHERE key=? AND seq=? AND loc=?",
                             (json.dumps(op.new_loc), op.key, op.seq, json.dumps(op.old_loc)))
            res.found = cur.rowcount > 0
            return res
        if op.kind == "retier":
            cur = db.execute("UPDATE versions SET tier=?, loc=?, meta=json_set(meta, '$.sc', ?) "
                             "WHERE key=? AND seq=? AND loc=?",
                             (op.tier, json.dumps(op.new_loc), op.storage_class, op.key, op.seq,
                              json.dumps(op.old_loc)))
            res.found = cur.rowcount > 0
            return res
        raise ValueError(f"unknown index op {op.kind!r}")


BULK = 500                                  # ops in one statement (11 variables each)
ROW_MARKS = "(" + ",".join("?" * 11) + ")"


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _plain_puts(ops: list[Op]) -> bool:
    """True when every op is an unconditional put, each of another key."""
    keys = set()
    for op in ops:
        if op.kind != "put" or op.if_none_match or op.if_match is not None:
            return False
        keys.add(op.record.key)
    return len(keys) == len(ops)


def _check_precondition(db, op: Op) -> str:
    """'' when a conditional put may go ahead (checked inside the write transaction, so
    concurrent writers of one key are serialised); 'failed' (412), or 'conflict' (409: the
    If-Match object was deleted meanwhile)."""
    row = db.execute("SELECT marker, etag FROM versions WHERE key=? AND latest=1", (op.record.key,)).fetchone()
    exists = row is not None and not row[0]
    if op.if_none_match and exists:
        return "failed"
    if op.if_match is not None:
        if not exists:
            return "conflict"
        if op.if_match not in ("*", row[1]):
            return "failed"
    return ""


class BucketIndex:
    """All shards of one bucket."""

    def __init__(self, directory: str, shards: int):
        os.makedirs(directory, exist_ok=True)
        existing = sorted(n for n in os.listdir(directory) if n.startswith("shard-") and n.endswith(".db"))
        count = len(existing) or shards
        self.shards = [Shard(os.path.join(directory, f"shard-{i:02d}.db")) for i in range(count)]

    def close(self) -> None:
        """Close every shard's connections."""
        for shard in self.shards:
            shard.close()

    def shard_of(self, key: str) -> int:
        """Index of the shard that holds ``key``."""
        return zlib.crc32(key.encode()) % len(self.shards)

    def get(self, key: str, version_id: str | None = None) -> Record | None:
        """The latest version of ``key`` (may be a delete marker), or the named version."""
        shard = self.shards[self.shard_of(key)]
        if version_id is None:
            rows = shard.query(f"SELECT {COLUMNS} FROM versions WHERE key=? AND latest=1", (key,))
        else:
            rows = shard.query(f"SELECT {COLUMNS} FROM versions WHERE key=? AND version_id=?", (key, version_id))
        return Record.from_row(rows[0]) if rows else None

    def usage(self) -> tuple[int, int]:
        """(bytes, objects) over every stored version."""
        total_bytes = total_objects = 0
        for shard in self.shards:
            b, n = shard.query("SELECT bytes, objects FROM usage WHERE id=0")[0]
            total_bytes += b
            total_objects += n
        return total_bytes, total_objects

    def is_empty(self) -> bool:
        """True when no version (not even a delete marker) is left."""
        return all(not s.query("SELECT 1 FROM versions LIMIT 1") for s in self.shards)

    def iter_current(self, prefix: str = "", after: str = "", expect: int | None = None) -> "MergedCursor":
        """Current (non-deleted) objects with ``prefix``, key > ``after``, in key order
        (``expect``: see :class:`MergedCursor`)."""
        return MergedCursor(self.shards, prefix, after, versions=False, expect=expect)

    def iter_versions(self, prefix: str = "", after: str = "", after_seq: int | None = None,
                      expect: int | None = None) -> "MergedCursor":
        """Every version (newest first within a key) with ``prefix``, after (``after``, ``after_seq``)."""
        return MergedCursor(self.shards, prefix, after, versions=True, after_seq=after_seq, expect=expect)

    def in_segment(self, seg_id: int) -> list[Record]:
        """Every version whose bytes live in segment ``seg_id``."""
        out = []
        for shard in self.shards:
            rows = shard.query(f"SELECT {COLUMNS} FROM versions WHERE json_extract(loc, '$.seg') = ?", (seg_id,))
            out.extend(Record.from_row(r) for r in rows)
        return out

    def consistent_cut(self) -> list[sqlite3.Connection]:
        """One connection per shard, each inside a read transaction begun while every shard's
        write lock was held, for every process (:meth:`Shard.writing`, then SQLite's own):
        together they see the index as of one instant (every commit before it, none after).
        The caller reads through them and closes them."""
        conns = [shard._connect() for shard in self.shards]
        with contextlib.ExitStack() as held:
            for shard in self.shards:
                held.enter_context(shard.writing())
            self._begin_cut(conns)
        return conns

    def _begin_cut(self, conns: list[sqlite3.Connection]) -> None:
        begun = []
        try:
            for shard in self.shards:  # a batch holds one shard at a time: no deadlock
                shard._writer.execute("BEGIN IMMEDIATE")  # also against a writer without the flock
                begun.append(shard._writer)
            for db in conns:
                db.execute("BEGIN")
                db.execute("SELECT 1 FROM versions LIMIT 1").fetchall()  # the first read pins the snapshot
        finally:
            for writer in begun:
                writer.execute("ROLLBACK")

    def changes(self, after: int, upto: int, limit: int) -> list[Record]:
        """Versions (and delete markers) with ``after < seq <= upto``, oldest first, at most
        ``limit`` (for replication: what was written since a watermark)."""
        out: list[Record] = []
        for shard in self.shards:
            rows = shard.query(f"SELECT {COLUMNS} FROM versions WHERE seq > ? AND seq <= ? "
                               f"ORDER BY seq LIMIT ?", (after, upto, limit))
            out.extend(Record.from_row(r) for r in rows)
        out.sort(key=lambda r: r.seq)
        return out[:limit]

    def cold_versions(self) -> list[Record]:
        """Every version whose bytes are on the capacity tier."""
        out = []
        for shard in self.shards:
            rows = shard.query(f"SELECT {COLUMNS} FROM versions WHERE tier != 'hot'")
            out.extend(Record.from_row(r) for r in rows)
        return out

    def versions_of(self, key: str) -> list[Record]:
        """Every version of one key, newest first."""
        rows = self.shards[self.shard_of(key)].query(
            f"SELECT {COLUMNS} FROM versions WHERE key=? ORDER BY seq DESC", (key,))
        return [Record.from_row(r) for r in rows]


def _prefix_end(prefix: str) -> str | None:
    """Smallest string greater than every string starting with ``prefix``."""
    if not prefix:
        return None
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class _ShardCursor:
    """One shard's rows in key order, read a page at a time: ``first`` rows at the start and
    after a jump, then :data:`PAGE` rows. A page holds raw rows: only the row at the head
    becomes a :class:`Record` (two JSON decodes), so the rows a merged listing reads past its
    end cost no decoding."""

    PAGE = 500

    def __init__(self, shard: Shard, prefix: str, versions: bool, first: int | None = None):
        self.shard, self.prefix, self.versions = shard, prefix, versions
        self.end = _prefix_end(prefix)
        self.first = first or self.PAGE
        self.buf: list[tuple] = []
        self.pos = 0
        self.head: Record | None = None   # buf[pos], decoded
        self.exhausted = True

    def _load(self, cond: str, args: list, rows: int) -> None:
        conds, args = [cond], list(args)
        if self.end is not None:
            conds.append("key < ?")
            args.append(self.end)
        if self.versions:
            sql = (f"SELECT {COLUMNS} FROM versions WHERE {' AND '.join(conds)} "
                   "ORDER BY key, seq DESC LIMIT ?")
        else:
            sql = (f"SELECT {COLUMNS} FROM versions WHERE latest=1 AND marker=0 AND {' AND '.join(conds)} "
                   "ORDER BY key LIMIT ?")
        self.buf = self.shard.query(sql, [*args, rows])
        self.pos = 0
        self.head = None
        self.exhausted = len(self.buf) < rows

    def seek_after(self, after: str, after_seq: int | None = None, rows: int | None = None) -> None:
        """Position on the first row with key > ``after`` (or same key, older than ``after_seq``),
        reading ``rows`` (a first page if not given)."""
        rows = rows or self.first
        if after < self.prefix:
            self._load("key >= ?", [self.prefix], rows)
        elif after_seq is not None:
            self._load("(key > ? OR (key = ? AND seq < ?))", [after, after, after_seq], rows)
        else:
            self._load("key > ?", [after], rows)

    def seek_ge(self, key: str) -> None:
        """Position on the first row with key >= ``key`` (past a common prefix: a first page again)."""
        self._load("key >= ?", [max(key, self.prefix)], self.first)

    def peek(self) -> Record | None:
        if self.head is None:
            if self.pos >= len(self.buf):
                if self.exhausted:
                    return None
                key, seq = self.buf[-1][:2]
                self.seek_after(key, seq if self.versions else None, self.PAGE)
                if not self.buf:
                    return None
            self.head = Record.from_row(self.buf[self.pos])
        return self.head

    def advance(self) -> None:
        self.pos += 1
        self.head = None


class MergedCursor:
    """Key-ordered merge of per-shard cursors; ``skip_past`` jumps over a common prefix.
    ``expect``: how many rows the caller will likely take (a listing's max-keys): each shard's
    first page is then its share and a margin (keys spread evenly over the shards), not a whole
    page; a shard that holds more reads on."""

    def __init__(self, shards: list[Shard], prefix: str, after: str, versions: bool,
                 after_seq: int | None = None, expect: int | None = None):
        first = None
        if expect is not None:
            share = (expect + 1) // len(shards) + 1   # + 1: the row that tells a listing is truncated
            first = min(4 * _ShardCursor.PAGE, share + share // 8 + 8)
        self.cursors = [_ShardCursor(s, prefix, versions, first) for s in shards]
        for c in self.cursors:
            c.seek_after(after, after_seq)

    def __iter__(self) -> Iterator[Record]:
        return self

    def __next__(self) -> Record:
        best = None
        for c in self.cursors:
            rec = c.peek()
            if rec is not None and (best is None or (rec.key, -rec.seq) < (best[0].key, -best[0].seq)):
                best = (rec, c)
        if best is None:
            raise StopIteration
        best[1].advance()
        return best[0]

    def skip_past(self, prefix: str) -> None:
        """Drop every remaining key that starts with ``prefix``."""
        end = _prefix_end(prefix)
        for c in self.cursors:
            rec = c.peek()
            if rec is not None and rec.key.startswith(prefix):
                c.seek_ge(end)
