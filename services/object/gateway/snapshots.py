"""Bucket snapshots: a durable manifest of a bucket's current versions (key -> version id)
at one instant, the hold it puts on those versions, and restore into another bucket.

Objects of every bucket share segment files, so a bucket snapshot is not a file-system
snapshot: it names versions, and those versions must then stay. Each bucket keeps its
snapshots in ``buckets/<name>/snapshots.db`` (SQLite, WAL, ``synchronous=FULL``)::

    snapshots(name PRIMARY KEY, created, objects, bytes)
    entries(snapshot, key, version_id, size, etag, PRIMARY KEY (snapshot, key))
    held ON entries(key, version_id)

Taking one (``create``) needs versioning Enabled (``InvalidBucketState`` otherwise: an
unversioned bucket overwrites in place, so nothing could be held). The cut is
:meth:`.index.BucketIndex.consistent_cut`: a read transaction on every shard begun while all
shard write locks are held, so the manifest has every PUT acknowledged before the request
and none that was not committed when the cut was taken; it is written in one transaction
before the answer.

Holds: every removal of one version (DeleteObject and DeleteObjects with a version id, and
lifecycle noncurrent-version expiration, all through ``Gateway.delete_version_or_key``)
passes :func:`deleting_version`, which refuses a version a snapshot names with S3
``AccessDenied`` "... held by snapshot X ...". While a snapshot is being recorded, such
removals in that bucket wait, so none can remove a version the snapshot is about to name
(an ``flock`` per bucket, so this holds across worker processes; a snapshot taken or deleted
is announced through :class:`.shared.Generation`).
Plain deletes add delete markers as usual; versioning cannot be suspended while a bucket
has snapshots (a suspended bucket's writes replace the null version in place).

Restore (:func:`restore_page`) copies a snapshot's versions, in key order and a page at a
time (the caller loops and reports progress), into another bucket that is empty or is
already marked as restoring this snapshot (``settings["restoring"]``), so a restore cut
short resumes; the marker is removed with the last page. A snapshot that a restore is
reading from cannot be deleted.
"""
from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import time

from . import objectlock, sse
from .errors import S3Error
from .index import Op, prepare_shm
from .shared import FileLock, next_seq

SCHEMA = """
CREATE TABLE IF NOT EXISTS snapshots (
    name TEXT PRIMARY KEY,
    created REAL NOT NULL,
    objects INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    snapshot TEXT NOT NULL,
    key TEXT NOT NULL,
    version_id TEXT NOT NULL,
    size INTEGER NOT NULL,
    etag TEXT NOT NULL,
    PRIMARY KEY (snapshot, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS held ON entries(key, version_id);
"""
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
PAGE_KEYS = 500
PAGE_BYTES = 256 << 20


class SnapshotStore:
    """The snapshots of one bucket (the database is opened on first use, made on first
    snapshot)."""

    def __init__(self, bucket_dir: str):
        self.path = os.path.join(bucket_dir, "snapshots.db")
        # version removals hold this shared, recording a snapshot exclusive (every process)
        self.holds = FileLock(os.path.join(bucket_dir, "holds.lock"))
        self.recording = FileLock(os.path.join(bucket_dir, "recording.lock"))
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._names: set[str] | None = None

    def _conn(self, create: bool = False) -> sqlite3.Connection | None:
        if self._db is None:
            if not create and not os.path.exists(self.path):
                return None
            prepare_shm(self.path)  # NOCOW: see .index
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(SCHEMA)
            self._db = db
        return self._db

    def names(self) -> set[str]:
        """Names of the bucket's snapshots (cached; reads the database once)."""
        if self._names is None:
            with self._lock:
                db = self._conn()
                self._names = {r[0] for r in db.execute("SELECT name FROM snapshots")} if db else set()
        return self._names

    def forget(self) -> None:
        """Read the names from the database again next time (another process changed them)."""
        self._names = None

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def record(self, index, name: str) -> dict:
        """Write the manifest of the bucket's current versions as ``name`` (blocking)."""
        created = time.time()
        cut = index.consistent_cut()
        try:
            with self._lock:
                db = self._conn(create=True)
                db.execute("BEGIN IMMEDIATE")
                try:
                    objects = size = 0
                    for conn in cut:
                        cur = conn.execute("SELECT key, version_id, size, etag FROM versions "
                                           "WHERE latest=1 AND marker=0")
                        while rows := cur.fetchmany(1000):
                            db.executemany("INSERT INTO entries VALUES (?,?,?,?,?)",
                                           [(name, *r) for r in rows])
                            objects += len(rows)
                            size += sum(r[2] for r in rows)
                    db.execute("INSERT INTO snapshots VALUES (?,?,?,?)", (name, created, objects, size))
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                self._names = None
        finally:
            for conn in cut:
                conn.close()
        return {"name": name, "created": created, "objects": objects, "bytes": size}

    def list(self) -> list[dict]:
        with self._lock:
            db = self._conn()
            rows = db.execute("SELECT name, created, objects, bytes FROM snapshots ORDER BY created, name"
                              ).fetchall() if db else []
        return [{"name": r[0], "created": r[1], "objects": r[2], "bytes": r[3]} for r in rows]

    def get(self, name: str) -> dict:
        for info in self.list():
            if info["name"] == name:
                return info
        raise S3Error("NoSuchSnapshot", f"The bucket has no snapshot {name!r}")

    def entries(self, name: str, after: str = "", limit: int = PAGE_KEYS) -> list[tuple]:
        """(key, version_id, size, etag) of ``name``, keys after ``after``, in key order."""
        with self._lock:
            db = self._conn()
            if db is None:
                return []
            return db.execute("SELECT key, version_id, size, etag FROM entries WHERE snapshot=? AND key>? "
                              "ORDER BY key LIMIT ?", (name, after, limit)).fetchall()

    def held_by(self, key: str, version_id: str) -> str | None:
        """The name of a snapshot that names this version, or None."""
        with self._lock:
            db = self._conn()
            row = db.execute("SELECT snapshot FROM entries WHERE key=? AND version_id=? LIMIT 1",
                             (key, version_id)).fetchone() if db else None
        return row[0] if row else None

    def delete(self, name: str) -> None:
        with self._lock:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM entries WHERE snapshot=?", (name,))
                db.execute("DELETE FROM snapshots WHERE name=?", (name,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._names = None


@contextlib.asynccontextmanager
async def deleting_version(gw, bucket, key: str, version_id: str):
    """Wrap the removal of one version: refuse it if a snapshot holds it (AccessDenied),
    wait while a snapshot of the bucket is being recorded (by any worker process)."""
    store = bucket.snapshots
    async with store.holds.hold(shared=True):
        gw.buckets.refresh(look=True)  # a snapshot another process recorded before we got the lock
        if store.names():
            held = await gw.run(store.held_by, key, version_id)
            if held:
                raise S3Error("AccessDenied", f"Version {version_id} of {key} is held by snapshot {held} "
                              f"of bucket {bucket.name}; delete the snapshot first",
                              resource=f"/{bucket.name}/{key}")
        yield


def check_can_suspend(bucket) -> None:
    """Versioning cannot be suspended while snapshots hold versions of the bucket."""
    names = bucket.snapshots.names()
    if names or bucket.snapshots.recording.busy():
        raise S3Error("InvalidBucketState", f"Bucket {bucket.name} has snapshots ({', '.join(sorted(names))}); "
                      "versioning cannot be suspended while they hold versions. Delete them first.")


async def create(gw, bucket, name: str) -> dict:
    """Take snapshot ``name`` of ``bucket`` now (see the module doc)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise S3Error("InvalidArgument", "A snapshot name is 1-63 letters, digits, '.', '_' and '-', "
                      "starting with a letter or digit")
    if bucket.versioning != "Enabled":
        raise S3Error("InvalidBucketState", f"Bucket {bucket.name} has versioning "
                      f"{bucket.versioning or 'Disabled'}; a snapshot holds versions, so enable "
                      "versioning on the bucket first")
    store = bucket.snapshots
    async with store.recording.hold():
        store.forget()
        if name in store.names():
            raise S3Error("SnapshotAlreadyExists", f"Bucket {bucket.name} already has a snapshot {name!r}")
        async with store.holds.hold():  # no version removal in flight, none starts
            info = await gw.run(store.record, bucket.index, name)
            gw.buckets.generation.bump(bucket.name)  # before removals go on: they look again
        return info


def restoring_from(gw, bucket, name: str) -> list[str]:
    """Buckets a restore of snapshot ``name`` of ``bucket`` is (still) filling."""
    marker = {"bucket": bucket.name, "snapshot": name}
    return sorted(b.name for b in gw.buckets.buckets.values() if b.settings.get("restoring") == marker)


async def delete(gw, bucket, name: str) -> None:
    """Delete a snapshot: its versions are no longer held (they stay until deleted)."""
    store = bucket.snapshots
    if name not in store.names():
        raise S3Error("NoSuchSnapshot", f"Bucket {bucket.name} has no snapshot {name!r}")
    users = restoring_from(gw, bucket, name)
    if users:
        raise S3Error("InvalidBucketState", f"Snapshot {name} is being restored into {', '.join(users)}; "
                      "finish that restore (run it again) or delete that bucket first")
    await gw.run(store.delete, name)
    gw.buckets.generation.bump(bucket.name)


async def restore_page(gw, bucket, name: str, target_name: str, after: str = "",
                       max_keys: int = PAGE_KEYS, max_bytes: int = PAGE_BYTES) -> dict:
    """Copy the next page of snapshot ``name`` (keys after ``after``) into ``target_name``."""
    store = bucket.snapshots
    info = store.get(name)
    target = gw.buckets.get(target_name)
    if target is bucket:
        raise S3Error("InvalidArgument", "Restore a snapshot into another bucket, not into itself")
    marker = {"bucket": bucket.name, "snapshot": name}
    if target.settings.get("restoring") != marker:
        if not await gw.run(target.index.is_empty):
            raise S3Error("BucketNotEmpty", f"Bucket {target_name} is not empty; restore into a new bucket")
        await gw.run(target.set_setting, "restoring", marker)
    limit = max(1, min(int(max_keys), 5000))
    entries = await gw.run(store.entries, name, after, limit)
    copied = skipped = size = processed = 0
    last = after
    for key, version_id, _size, _etag in entries:
        if size >= max_bytes:
            break
        processed += 1
        last = key
        src = bucket.index.get(key, version_id)
        if src is None or src.marker:
            raise S3Error("InternalError", f"Version {version_id} of {key}, held by snapshot {name}, is missing")
        have = target.index.get(key)
        if have is not None and not have.marker and have.etag == src.etag and have.size == src.size:
            skipped += 1  # copied by an earlier attempt of this restore
            continue
        wk = sse.same_as(gw.keyring, src.meta.get("sse"))  # encrypted stays encrypted, under a new key
        cipher = wk.cipher() if wk else None
        stored = await gw.copy_data(target, src, cipher=cipher)
        meta = objectlock.strip(src.meta)
        if wk:
            meta["sse"] = wk.meta(cipher.np)
        if "parts" in src.loc:
            meta["ck"] = {}  # composite checksums do not carry over to a single-part copy
            meta.pop("pck", None)
        rec = gw.make_record(target, key, stored, src.etag, meta)
        await gw.commit(target, Op("put", rec, versioned=target.versioning == "Enabled"), stored.in_segment)
        copied += 1
        size += src.size
    done = processed == len(entries) < limit
    if done:
        await gw.run(target.set_setting, "restoring", None)
    return {"snapshot": name, "target": target_name, "copied": copied, "skipped": skipped, "bytes": size,
            "next": None if done else last, "done": done, "total": info["objects"]}


async def changes(gw, bucket, after: int, limit: int) -> dict:
    """Versions and delete markers written after sequence ``after`` (for replication), oldest
    first, up to a horizon below which every write is committed: ``upto`` is taken, kept
    below the sequence floor of every worker process (:class:`.shared.SeqFloors`: the lowest
    number of a put still in flight there), then a no-op commit on the empty key goes
    through this process's group committer behind every write that already has its sequence
    number (a record gets one just before it is queued, with no await in between).
    ``horizon`` is where the next call starts: ``upto``, or the last change listed when
    ``truncated``."""
    horizon = max(min(next_seq(), gw.floors.lowest() - 1), int(after))
    await gw.commit(bucket, Op("set_meta", key="", version_id="", meta={}))
    limit = max(1, min(int(limit), 5000))
    recs = await gw.run(bucket.index.changes, int(after), horizon, limit + 1)
    truncated = len(recs) > limit
    recs = recs[:limit]
    return {"horizon": recs[-1].seq if truncated else horizon, "upto": horizon, "truncated": truncated,
            "changes": [{"key": r.key, "version_id": r.version_id, "seq": r.seq, "marker": r.marker,
                         "size": r.size, "etag": r.etag} for r in recs]}
