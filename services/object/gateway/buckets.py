"""Buckets: names, settings (owner, versioning, quota, tags) and live usage, all held in memory.

Each bucket's settings are in ``buckets/<name>/bucket.json`` (atomic writes); usage (bytes and
objects over every stored version) is summed from the index at start-up and then kept up to
date by the committer, so quota checks cost no I/O.
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
from .index import BucketIndex, OpResult
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

    def __init__(self, root: str, name: str, settings: dict, shards: int):
        self.name = name
        self.dir = os.path.join(root, "buckets", name)
        self.settings = settings
        self.index = BucketIndex(os.path.join(self.dir, "index"), shards)
        self.data_dir = os.path.join(self.dir, "data")
        self.uploads_dir = os.path.join(self.dir, "uploads")
        self.snapshots = SnapshotStore(self.dir)
        self.bytes, self.objects = self.index.usage()

    @property
    def owner(self) -> str:
        return self.settings.get("owner", "")

    @property
    def versioning(self) -> str:
        """'' (never enabled), 'Enabled' or 'Suspended'."""
        return self.settings.get("versioning", "")

    def save(self) -> None:
        """Persist settings atomically (not into a bucket directory deleted meanwhile)."""
        write_json_atomic(os.path.join(self.dir, "bucket.json"), self.settings, make_dirs=False)

    def set_setting(self, name: str, value) -> None:
        """Store (or with None, remove) one setting and persist the settings (blocking)."""
        if value is None:
            self.settings.pop(name, None)
        else:
            self.settings[name] = value
        self.save()

    def set_versioning(self, status: str) -> None:
        """Change the versioning state ('Enabled' or 'Suspended') and persist it (blocking)."""
        if status == "Suspended" and self.versioning:
            check_can_suspend(self)
        self.set_setting("versioning", status)

    def check_quota(self, add_bytes: int, add_objects: int = 1) -> None:
        """Raise ``QuotaExceeded`` when storing this much more would pass the bucket quota."""
        quota = self.settings.get("quota") or {}
        max_bytes, max_objects = quota.get("bytes"), quota.get("objects")
        if max_bytes is not None and self.bytes + add_bytes > max_bytes:
            raise S3Error("QuotaExceeded", f"Bucket {self.name} quota of {max_bytes} bytes would be exceeded "
                          f"(used {self.bytes}, this request {add_bytes})", BucketName=self.name)
        if max_objects is not None and add_objects and self.objects + add_objects > max_objects:
            raise S3Error("QuotaExceeded", f"Bucket {self.name} quota of {max_objects} objects would be exceeded",
                          BucketName=self.name)

    def account(self, result: OpResult) -> None:
        """Apply the usage change of a committed index op."""
        self.bytes += result.bytes_delta
        self.objects += result.objects_delta

    def usage(self) -> dict:
        """Settings plus usage, as the admin interface reports it."""
        return {"name": self.name, "owner": self.owner, "created": self.settings.get("created"),
                "versioning": self.versioning or "Disabled", "quota": self.settings.get("quota") or {},
                "bytes": self.bytes, "objects": self.objects, "snapshots": len(self.snapshots.names()),
                "restoring": self.settings.get("restoring")}


class BucketStore:
    """Every bucket of one gateway, by name."""

    def __init__(self, root: str, shards: int = 8):
        self.root = root
        self.shards = shards
        self.buckets: dict[str, Bucket] = {}
        base = os.path.join(root, "buckets")
        os.makedirs(base, exist_ok=True)
        for name in sorted(os.listdir(base)):
            path = os.path.join(base, name, "bucket.json")
            if os.path.exists(path):
                with open(path) as fh:
                    self.buckets[name] = Bucket(root, name, json.load(fh), shards)
            elif name.startswith(".trash-"):
                shutil.rmtree(os.path.join(base, name), ignore_errors=True)

    def get(self, name: str) -> Bucket:
        """The bucket called ``name``, or ``NoSuchBucket``."""
        bucket = self.buckets.get(name)
        if bucket is None:
            raise S3Error("NoSuchBucket", BucketName=name, resource=f"/{name}")
        return bucket

    def create(self, name: str, owner: str, region: str = "") -> Bucket:
        """Create a bucket owned by ``owner`` (blocking: makes directories and fsyncs)."""
        validate_bucket_name(name)
        existing = self.buckets.get(name)
        if existing is not None:
            if existing.owner == owner:
                raise S3Error("BucketAlreadyOwnedByYou", BucketName=name)
            raise S3Error("BucketAlreadyExists", BucketName=name)
        bdir = os.path.join(self.root, "buckets", name)
        for sub in ("index", "data", "uploads"):
            os.makedirs(os.path.join(bdir, sub), exist_ok=True)
        settings = {"owner": owner, "created": time.time(), "region": region, "versioning": "", "quota": {}}
        bucket = Bucket(self.root, name, settings, self.shards)
        bucket.save()
        fsync_dir(os.path.join(self.root, "buckets"))
        self.buckets[name] = bucket
        return bucket

    def delete(self, name: str) -> None:
        """Delete an empty bucket (``BucketNotEmpty`` otherwise)."""
        bucket = self.get(name)
        if not bucket.index.is_empty():
            raise S3Error("BucketNotEmpty", BucketName=name)
        del self.buckets[name]
        bucket.index.close()
        bucket.snapshots.close()
        trash = os.path.join(self.root, "buckets", f".trash-{name}-{uuid.uuid4().hex[:8]}")
        os.rename(bucket.dir, trash)
        fsync_dir(os.path.join(self.root, "buckets"))
        shutil.rmtree(trash, ignore_errors=True)
