"""Buckets: names and settings (owner, versioning, quota, tags), held in memory; usage.

Each bucket's settings are in ``buckets/<name>/bucket.json`` (atomic writes). Several worker
processes may serve one data root (:mod:`.workers`): a process that changes a setting, or
creates or deletes a bucket, appends the bucket's name to the shared :class:`.shared.Generation`
after the change is durable, and every process checks that log (one ``stat``) whenever it
looks a bucket up, reloading what changed before it answers. A setting is changed by reading
``bucket.json`` again under the bucket's ``flock`` (so two workers changing two settings at
once both stay). Usage (bytes and objects over every stored version) is kept by the index
shards themselves (:meth:`.index.BucketIndex.usage`), read only when a quota is set or the
admin interface asks.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import time
import uuid

from plumbing.atomic import fsync_dir, write_json_atomic

from .errors import S3Error
from .index import BucketIndex
from .shared import FileLock, Generation
from .snapshots import SnapshotStore, check_can_suspend

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def validate_bucket_name(name: str) -> None:
    """Raise ``InvalidBucketName`` unless ``name`` follows S3's bucket naming rules."""
    ok = bool(_BUCKET_RE.match(name)) and ".." not in name and ".-" not in name and "-." not in name
    if ok:
        try:
            ipaddress.IPv4Address(name)
            ok = False
        except ValueError:
            pass
    if ok and (name.startswith("xn--") or name.endswith("-s3alias") or name.startswith("sthree-")):
        ok = False
    if not ok:
        raise S3Error("InvalidBucketName", BucketName=name)


class Bucket:
    """One bucket: settings, usage counters and its sharded index."""

    def __init__(self, root: str, name: str, settings: dict, shards: int, generation: Generation):
        self.name = name
        self.dir = os.path.join(root, "buckets", name)
        self.settings = settings
        self.generation = generation
        self.index = BucketIndex(os.path.join(self.dir, "index"), shards)
        self.data_dir = os.path.join(self.dir, "data")
        self.uploads_dir = os.path.join(self.dir, "uploads")
        self.snapshots = SnapshotStore(self.dir)
        self.settings_lock = FileLock(os.path.join(self.dir, "settings.lock"))

    @property
    def settings_path(self) -> str:
        return os.path.join(self.dir, "bucket.json")

    def reload(self) -> None:
        """Read the settings again (another process changed them) and forget cached snapshot names."""
        try:
            with open(self.settings_path) as fh:
                self.settings = json.load(fh)
        except (FileNotFoundError, ValueError):
            pass  # being deleted: the next change to the set of buckets drops it
        self.snapshots.forget()

    @property
    def owner(self) -> str:
        return self.settings.get("owner", "")

    @property
    def versioning(self) -> str:
        """'' (never enabled), 'Enabled' or 'Suspended'."""
        return self.settings.get("versioning", "")

    def save(self) -> None:
        """Persist settings atomically (not into a bucket directory deleted meanwhile) and tell
        the other processes."""
        write_json_atomic(self.settings_path, self.settings, make_dirs=False)
        self.generation.bump(self.name)

    def set_setting(self, name: str, value) -> None:
        """Store (or with None, remove) one setting and persist the settings (blocking)."""
        self.update_settings({name: value})

    def update_settings(self, changes: dict) -> None:
        """Store (value None: remove) several settings at once, durably (blocking); settings
        another process changed meanwhile stay as it left them."""
        with self.settings_lock.held():
            self.reload()
            for name, value in changes.items():
                if value is None:
                    self.settings.pop(name, None)
                else:
                    self.settings[name] = value
            self.save()

    def set_versioning(self, status: str) -> None:
        """Change the versioning state ('Enabled' or 'Suspended') and persist it (blocking)."""
        if status == "Suspended" and self.versioning:
            self.snapshots.forget()  # taken by another process, maybe
            check_can_suspend(self)
        self.set_setting("versioning", status)

    def check_quota(self, add_bytes: int, add_objects: int = 1) -> None:
        """Raise ``QuotaExceeded`` when storing this much more would pass the bucket quota."""
        quota = self.settings.get("quota") or {}
        max_bytes, max_objects = quota.get("bytes"), quota.get("objects")
        if max_bytes is None and (max_objects is None or not add_objects):
            return
        used_bytes, used_objects = self.index.usage()
        if max_bytes is not None and used_bytes + add_bytes > max_bytes:
            raise S3Error("QuotaExceeded", f"Bucket {self.name} quota of {max_bytes} bytes would be exceeded "
                          f"(used {used_bytes}, this request {add_bytes})", BucketName=self.name)
        if max_objects is not None and add_objects and used_objects + add_objects > max_objects:
            raise S3Error("QuotaExceeded", f"Bucket {self.name} quota of {max_objects} objects would be exceeded",
                          BucketName=self.name)

    def usage(self) -> dict:
        """Settings plus usage, as the admin interface reports it."""
        used_bytes, used_objects = self.index.usage()
        return {"name": self.name, "owner": self.owner, "created": self.settings.get("created"),
                "versioning": self.versioning or "Disabled", "quota": self.settings.get("quota") or {},
                "bytes": used_bytes, "objects": used_objects, "snapshots": len(self.snapshots.names()),
                "restoring": self.settings.get("restoring")}


class BucketStore:
    """Every bucket of one gateway, by name (as of the last change any process made)."""

    def __init__(self, root: str, shards: int):
        self.root = root
        self.shards = shards
        self.base = os.path.join(root, "buckets")
        os.makedirs(self.base, exist_ok=True)
        self.generation = Generation(root)
        self.lock = FileLock(os.path.join(self.base, ".lock"))  # creates and deletes
        self._by_name: dict[str, Bucket] = {}
        for name in os.listdir(self.base):
            if name.startswith(".trash-"):  # a delete cut short
                shutil.rmtree(os.path.join(self.base, name), ignore_errors=True)
        self._rescan()

    def _rescan(self) -> None:
        """Load buckets made and drop buckets deleted (by any process) since the last scan."""
        found = set()
        for name in sorted(os.listdir(self.base)):
            path = os.path.join(self.base, name, "bucket.json")
            if name.startswith("."):
                continue
            try:
                with open(path) as fh:
                    settings = json.load(fh)
            except (FileNotFoundError, NotADirectoryError, ValueError):
                continue  # being made (its settings are written last) or deleted
            found.add(name)
            if name not in self._by_name:
                self._by_name[name] = Bucket(self.root, name, settings, self.shards, self.generation)
        for name in set(self._by_name) - found:
            bucket = self._by_name.pop(name)
            bucket.index.close()
            bucket.snapshots.close()

    def refresh(self, look: bool = False) -> None:
        """Apply what other processes changed (see :meth:`.shared.Generation.changes` for
        ``look``)."""
        changed = self.generation.changes(look)
        if not changed:
            return
        if "*" in changed:
            self._rescan()
        for name in changed:
            bucket = self._by_name.get(name)
            if bucket is not None:
                bucket.reload()

    @property
    def buckets(self) -> dict[str, Bucket]:
        """Every bucket, by name (current: see :meth:`refresh`)."""
        self.refresh()
        return self._by_name

    def get(self, name: str) -> Bucket:
        """The bucket called ``name``, or ``NoSuchBucket``."""
        self.refresh()
        bucket = self._by_name.get(name)
        if bucket is None:
            raise S3Error("NoSuchBucket", BucketName=name, resource=f"/{name}")
        return bucket

    def create(self, name: str, owner: str, region: str = "") -> Bucket:
        """Create a bucket owned by ``owner`` (blocking: makes directories and fsyncs)."""
        validate_bucket_name(name)
        with self.lock.held():
            self._rescan()
            existing = self._by_name.get(name)
            if existing is not None:
                if existing.owner == owner:
                    raise S3Error("BucketAlreadyOwnedByYou", BucketName=name)
                raise S3Error("BucketAlreadyExists", BucketName=name)
            bdir = os.path.join(self.base, name)
            for sub in ("index", "data", "uploads"):
                os.makedirs(os.path.join(bdir, sub), exist_ok=True)
            settings = {"owner": owner, "created": time.time(), "region": region, "versioning": "", "quota": {}}
            bucket = Bucket(self.root, name, settings, self.shards, self.generation)
            write_json_atomic(bucket.settings_path, settings, make_dirs=False)
            fsync_dir(self.base)
            self._by_name[name] = bucket
            self.generation.bump("*")
        return bucket

    def delete(self, name: str) -> None:
        """Delete an empty bucket (``BucketNotEmpty`` otherwise)."""
        with self.lock.held():
            bucket = self.get(name)
            if not bucket.index.is_empty():
                raise S3Error("BucketNotEmpty", BucketName=name)
            del self._by_name[name]
            bucket.index.close()
            bucket.snapshots.close()
            trash = os.path.join(self.base, f".trash-{name}-{uuid.uuid4().hex[:8]}")
            os.rename(bucket.dir, trash)
            fsync_dir(self.base)
            self.generation.bump("*")
        shutil.rmtree(trash, ignore_errors=True)
