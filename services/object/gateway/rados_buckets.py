"""Buckets in RADOS, one consistent view for every gateway of the pool.

The pool's object ``strata.buckets`` maps each bucket name (omap key) to its id, owner and
creation time; a create is one op with ``omap_cmp(name, "")``, so of two gateways creating one
name exactly one wins. A bucket's settings (owner, versioning, policy, ACL, CORS, tags, quota)
are the omap value ``s`` of ``<bucket-id>.settings``, changed by compare-and-write on the value
read, then ``notify``. Every gateway watches the settings object of each bucket it has loaded,
and the registry: a notify marks the bucket stale (or the registry changed) and is acknowledged,
and ``notify`` returns only when every watcher acknowledged or the OSD dropped its watch, so
the change holds on every gateway from the changer's answer on.

A watch is registered with a lease of :data:`WATCH_TIMEOUT` seconds: librados pings it every
:data:`PING_INTERVAL` (the gateway's ``objecter_tick_interval``) and the OSD drops a watch not
pinged for that long, a dead gateway's too, which is all a notify waits for a gateway that
died (Ceph's default lease, 30 s, made every bucket change wait ~30 s after a node's death).
A gateway trusts its cached settings only while its watch was confirmed by the OSD less than
:data:`TRUSTED_FOR` ago (``Watch.check``): a gateway cut off from the OSD for longer may have
had its watch dropped and missed a notify, so it reads the settings on every request until
a ping is confirmed again; a watch that failed (``Watch.check`` raises: the OSD dropped it)
is registered again, then the settings read.
"""
from __future__ import annotations

import errno
import json
import logging
import threading
import time
import uuid

import rados

from .buckets import Bucket, validate_bucket_name
from .errors import S3Error
from .rados_data import remove
from .rados_index import DELETING, STALE_MARK, RadosIndex, clear_mark

log = logging.getLogger("strata.s3.rados")
REGISTRY = "strata.buckets"
WATCH_TIMEOUT = 10   # s: a watch's lease (the longest a dead gateway holds a notify back)
PING_INTERVAL = 2    # s: how often librados pings every watch (objecter_tick_interval)
TRUSTED_FOR = WATCH_TIMEOUT - 2   # s: a cache is used while its watch's last ping is younger
NOTIFY_MS = 30000    # longer than a watch's lease: a gateway cut off has stopped trusting its cache


def uploads_oid(bucket_id: str) -> str:
    """The object listing a bucket's multipart uploads (omap ``o/<key>\\x01<upload id>``: open,
    ``c/<upload id>``: completed)."""
    return f"{bucket_id}.uploads"


def upload_oid(bucket_id: str, upload_id: str) -> str:
    """One multipart upload's object (see :mod:`.rados_multipart`)."""
    return f"{bucket_id}.upload.{upload_id}"


def _cas(io, oid: str, key: str, old: bytes, new: bytes | None) -> bool:
    """Set (None: remove) omap ``key`` of ``oid`` only if it is still ``old``; False if it was not."""
    with rados.WriteOpCtx() as op:
        op.omap_cmp(key, old.decode(), rados.LIBRADOS_CMPXATTR_OP_EQ)
        if new is None:
            io.remove_omap_keys(op, (key,))
        else:
            io.set_omap(op, (key,), (new,))
        try:
            io.operate_write_op(op, oid)
            return True
        except rados.Error as exc:
            if getattr(exc, "errno", None) == errno.ECANCELED:
                return False
            raise


def _read(io, oid: str, key: str) -> bytes:
    with rados.ReadOpCtx() as op:
        it, _ = io.get_omap_vals_by_keys(op, (key,))
        try:
            io.operate_read_op(op, oid)
        except rados.ObjectNotFound:
            return b""
        return dict(it).get(key, b"")


class Watched:
    """A watch of object ``oid`` whose ``changed`` callback runs on a notify and when the
    watch fails."""

    def __init__(self, io, oid: str, changed):
        self.io, self.oid, self.changed = io, oid, changed
        self.lock = threading.Lock()   # requests check it from several threads
        self.handle = self.io.watch(oid, changed, changed, WATCH_TIMEOUT)

    def confirmed(self) -> bool:
        """True while no notify can have been missed: the OSD confirmed the watch less than
        :data:`TRUSTED_FOR` ago. A failed watch is registered again (False: read what it
        guards after this)."""
        with self.lock:
            try:
                return self.handle.check().total_seconds() < TRUSTED_FOR
            except rados.Error as exc:
                log.warning("watch of %s lost (%s): registering it again", self.oid, exc)
            self.close()
            self.handle = self.io.watch(self.oid, self.changed, self.changed, WATCH_TIMEOUT)
            return False

    def close(self) -> None:
        try:
            self.handle.close()
        except rados.Error:
            pass


class RadosBucket:
    """One bucket: its settings (cached, dropped on a notify) and its :class:`.rados_index.RadosIndex`."""

    rados = True
    snapshots = None

    def __init__(self, io, name: str, entry: dict):
        self.io, self.name, self.id = io, name, entry["id"]
        self.index = RadosIndex(io, self.id, entry["shards"])
        self.settings_oid = f"{self.id}.settings"
        self.settings: dict = {}
        self.stale = True
        self.watch = None

    def open(self) -> "RadosBucket":
        """Watch the settings object, then read the settings."""
        self.watch = Watched(self.io, self.settings_oid, self._notified)
        self.reload()
        return self

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def _notified(self, *_args) -> None:
        self.stale = True

    def fresh(self) -> "RadosBucket":
        """Settings as every gateway sees them now (read again after a notify, or while the
        watch is not confirmed)."""
        if self.watch is None or not self.watch.confirmed():
            self.stale = True
        if self.stale:
            self.reload()
        return self

    def reload(self) -> None:
        self.stale = False   # before the read: a notify during it marks it stale again
        raw = _read(self.io, self.settings_oid, "s")
        if raw:
            self.settings = json.loads(raw)

    @property
    def owner(self) -> str:
        return self.settings.get("owner", "")

    @property
    def versioning(self) -> str:
        return self.settings.get("versioning", "")

    def update_settings(self, changes: dict) -> None:
        """Store (value None: remove) several settings at once (blocking): a compare-and-write
        against concurrent changes of any gateway, then a notify every watcher acknowledges."""
        while True:
            raw = _read(self.io, self.settings_oid, "s")
            settings = json.loads(raw) if raw else {}
            for name, value in changes.items():
                if value is None:
                    settings.pop(name, None)
                else:
                    settings[name] = value
            if _cas(self.io, self.settings_oid, "s", raw, json.dumps(settings).encode()):
                break
        self.settings = settings
        try:
            self.io.notify(self.settings_oid, "settings", NOTIFY_MS)
        except rados.Error as exc:   # a watcher that did not answer in time has lost its watch
            log.warning("bucket %s: notify of a settings change: %s", self.name, exc)

    def set_setting(self, name: str, value) -> None:
        self.update_settings({name: value})

    def set_versioning(self, status: str) -> None:
        self.set_setting("versioning", status)

    check_quota = Bucket.check_quota

    def usage(self) -> dict:
        used_bytes, used_objects = self.index.usage()
        return {"name": self.name, "owner": self.owner, "created": self.settings.get("created"),
                "versioning": self.versioning or "Disabled", "quota": self.settings.get("quota") or {},
                "bytes": used_bytes, "objects": used_objects, "snapshots": 0, "store": "rados"}


class RadosBucketStore:
    """Every bucket of the pool, by name (the registry read again after any gateway changed it)."""

    def __init__(self, io, shards: int):
        self.io, self.shards = io, shards
        self._by_name: dict[str, RadosBucket] = {}
        self._lock = threading.Lock()
        self.registry_changed = True
        with rados.WriteOpCtx() as op:
            op.new(rados.LIBRADOS_CREATE_IDEMPOTENT)
            self.io.operate_write_op(op, REGISTRY)
        self.watch = Watched(self.io, REGISTRY, self._changed)

    def _changed(self, *_args) -> None:
        self.registry_changed = True

    def close(self) -> None:
        for bucket in self._by_name.values():
            bucket.close()
        self.watch.close()

    def _entries(self) -> dict[str, dict]:
        out, after = {}, ""
        while True:
            with rados.ReadOpCtx() as op:
                it, _ = self.io.get_omap_vals(op, after, "", 1000)
                self.io.operate_read_op(op, REGISTRY)
                page = list(it)
            out.update((k, json.loads(v)) for k, v in page)
            if len(page) < 1000:
                return out
            after = page[-1][0]

    def _sync(self) -> None:
        """Drop buckets deleted (or deleted and made again) by any gateway."""
        if not self.watch.confirmed():
            self.registry_changed = True
        if not self.registry_changed:
            return
        self.registry_changed = False
        entries = self._entries()
        with self._lock:
            for name, bucket in list(self._by_name.items()):
                if entries.get(name, {}).get("id") != bucket.id:
                    self._by_name.pop(name).close()
        return entries

    @property
    def buckets(self) -> dict[str, RadosBucket]:
        """Every bucket, by name."""
        self.registry_changed = True
        entries = self._sync() or {}
        for name in entries:
            self._load(name, entries[name])
        return {n: b.fresh() for n, b in self._by_name.items() if n in entries}

    def _load(self, name: str, entry: dict) -> RadosBucket:
        with self._lock:
            bucket = self._by_name.get(name)
            if bucket is None:
                bucket = self._by_name[name] = RadosBucket(self.io, name, entry).open()
            return bucket

    def get(self, name: str) -> RadosBucket:
        """The bucket called ``name``, or ``NoSuchBucket``."""
        self._sync()
        bucket = self._by_name.get(name)
        if bucket is None:
            raw = _read(self.io, REGISTRY, name)
            if not raw:
                raise S3Error("NoSuchBucket", BucketName=name, resource=f"/{name}")
            bucket = self._load(name, json.loads(raw))
        return bucket.fresh()

    def refresh(self, look: bool = False) -> None:
        self._sync()

    def create(self, name: str, owner: str, region: str = "") -> RadosBucket:
        """Create a bucket owned by ``owner`` (blocking): its index shards and settings first,
        then its registry entry, the one op that decides between gateways."""
        validate_bucket_name(name)
        entry = {"id": f"b.{uuid.uuid4().hex[:16]}", "shards": self.shards, "owner": owner}
        settings = {"owner": owner, "created": time.time(), "region": region, "versioning": "", "quota": {}}
        bucket = RadosBucket(self.io, name, entry)
        bucket.index.create()
        self.io.write_full(bucket.settings_oid, b"")
        with rados.WriteOpCtx() as op:
            self.io.set_omap(op, ("s",), (json.dumps(settings).encode(),))
            self.io.operate_write_op(op, bucket.settings_oid)
        if not _cas(self.io, REGISTRY, name, b"", json.dumps(entry).encode()):
            self._destroy(bucket)
            existing = json.loads(_read(self.io, REGISTRY, name) or b"{}")
            if existing.get("owner") == owner:
                raise S3Error("BucketAlreadyOwnedByYou", BucketName=name)
            raise S3Error("BucketAlreadyExists", BucketName=name)
        self._notify()
        return self._load(name, entry).fresh()

    def delete(self, name: str) -> None:
        """Delete an empty bucket (``BucketNotEmpty`` otherwise). Every index shard is marked
        first (no index op lands on a marked shard: :data:`.rados_index.DELETING`), then found
        empty, then the registry entry goes: an object write racing it on any gateway either
        landed before the mark (``BucketNotEmpty``) or waits for the mark and finds the bucket
        gone (``NoSuchBucket``)."""
        bucket = self.get(name)
        index = bucket.index
        mark = f"{time.time()} {uuid.uuid4().hex}".encode()
        marked: list[str] = []
        try:
            for n in range(index.shards):
                try:
                    if not _cas(self.io, index.oid(n), DELETING, b"", mark):
                        other = _read(self.io, index.oid(n), DELETING)
                        if other and time.time() - float(other.split()[0]) >= STALE_MARK:
                            clear_mark(self.io, index.oid(n), other)   # its deleter died
                        if not _cas(self.io, index.oid(n), DELETING, b"", mark):
                            raise S3Error("OperationAborted", "Another DeleteBucket of this bucket is in "
                                          "progress", BucketName=name)
                except rados.ObjectNotFound:
                    raise S3Error("NoSuchBucket", BucketName=name, resource=f"/{name}") from None
                marked.append(index.oid(n))
            if not index.is_empty():
                raise S3Error("BucketNotEmpty", BucketName=name)
            raw = _read(self.io, REGISTRY, name)
            if not raw or json.loads(raw)["id"] != bucket.id or not _cas(self.io, REGISTRY, name, raw, None):
                raise S3Error("NoSuchBucket", BucketName=name, resource=f"/{name}")
        except BaseException:
            for oid in marked:
                clear_mark(self.io, oid, mark)
            raise
        with self._lock:
            self._by_name.pop(name, None)
        bucket.close()
        self._destroy(bucket)   # before the notify: writes waiting on the marks end at once
        self._notify()

    def _destroy(self, bucket: RadosBucket) -> None:
        """Remove a bucket's objects: index shards, settings, uploads left open (their parts)."""
        bucket.index.destroy()
        names = [bucket.settings_oid, uploads_oid(bucket.id)]
        with rados.ReadOpCtx() as op:
            it, _ = self.io.get_omap_vals(op, "", "", 100000)
            try:
                self.io.operate_read_op(op, uploads_oid(bucket.id))
                uploads = [k.rpartition("\x01")[2] if k.startswith("o/") else k[2:] for k, _ in it]
            except rados.ObjectNotFound:
                uploads = []
        for upload_id in uploads:
            oid = upload_oid(bucket.id, upload_id)
            with rados.ReadOpCtx() as op:
                it, _ = self.io.get_omap_vals(op, "", "part/", 100000)
                try:
                    self.io.operate_read_op(op, oid)
                    parts = [json.loads(v) for _, v in it]
                except rados.ObjectNotFound:
                    parts = []
            for part in parts:
                remove(self.io, part["loc"])
            names.append(oid)
        for name in names:
            try:
                self.io.remove_object(name)
            except rados.ObjectNotFound:
                pass

    def _notify(self) -> None:
        try:
            self.io.notify(REGISTRY, "buckets", NOTIFY_MS)
        except rados.Error as exc:
            log.warning("notify of the bucket registry: %s", exc)
