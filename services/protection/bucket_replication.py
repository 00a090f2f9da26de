"""Bucket replication: copy a bucket's new object versions to a bucket on an S3 endpoint,
incrementally, at an interval, as a Job.

The destination is a backup target (endpoint, keys, bucket, prefix) rather than a
replication peer: the peer link carries an API token for the other plane, not S3 keys, and
the copy is plain S3 (PUT and DELETE), so the same row serves another Strata's gateway or
any S3 service, and its secret is kept like every other S3 secret of this service.

A run asks the local gateway for its change feed (``GET /_strata/admin/buckets/NAME/
changes?after=WATERMARK``: versions and delete markers in sequence order, up to a horizon
below which every write is committed) and applies it a page at a time, ``PARALLEL`` keys at
once and the changes of one key in order: a version is read with GetObject(VersionId)
through the plane's own S3 key and written under the target's prefix with the same key,
content type, user metadata, system headers and tags (one PutObject, a managed multipart
upload above 64 MiB); a delete marker becomes a DeleteObject of the key. Bytes are drawn
from the shared I/O budget (class ``replication``). The watermark moves (and is saved) over
the changes done without a gap, so a run that fails or whose worker is killed is resumed by
the next run from there; what it had in flight (at most ``PARALLEL`` keys) may be written
twice. A PUT is atomic on the destination, so it never holds a half-written object (a cut
multipart upload is aborted, or never completed). As in S3 replication, permanent deletes
of one version (with a version id, or by lifecycle) are not replicated, and replication
needs versioning Enabled on the source (so that deletes leave markers to replicate).
"""
import logging
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from urllib.parse import urlencode

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import BotoCoreError, ClientError
from django import db
from django.db import transaction
from django.utils import timezone

from services.object.public import admin_call, admin_client, plane_s3_config
from services.protection import beat, objstore
from services.protection.backup import s3_for
from services.protection.bucket_snapshots import require_versioned
from services.protection.locks import recorded_run
from services.protection.models import BucketReplication
from plane import iobudget

log = logging.getLogger(__name__)
TASK = "protection.run_bucket_replication"
PAGE = 500
PARALLEL = 4  # keys copied at once
MiB = 1 << 20
TRANSFER = TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=16 * MiB,
                          use_threads=False)
HEADERS = {"ContentType": "ContentType", "ContentEncoding": "ContentEncoding",
           "CacheControl": "CacheControl", "ContentDisposition": "ContentDisposition",
           "ContentLanguage": "ContentLanguage", "Expires": "Expires"}


class BucketReplicationFailed(Exception):
    """A run did not complete; the next run resumes from the saved watermark."""


_scheduled = beat.Scheduled(BucketReplication, "bucket-replication", TASK)
update_replication = _scheduled.update


def create_replication(**fields) -> BucketReplication:
    require_versioned(fields["bucket"])
    return _scheduled.create(**fields)


def delete_replication(rep: BucketReplication) -> None:
    """Stop replicating; what was copied stays on the target."""
    with transaction.atomic():
        beat.delete_periodic_task(rep)
        rep.delete()


class _Reader:
    """A file-like ``read(n)`` over an iterator of byte chunks (for upload_fileobj)."""

    def __init__(self, chunks):
        self.chunks = iter(chunks)
        self.buf = b""

    def read(self, n=-1) -> bytes:
        while n < 0 or len(self.buf) < n:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buf += chunk
        if n < 0:
            out, self.buf = self.buf, b""
        else:
            out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _source_client():
    cfg = plane_s3_config()
    if cfg is None:
        raise BucketReplicationFailed("the object service has no S3 key of its own yet "
                                      "(`strata up` makes it); nothing can be read")
    return objstore.s3_client(cfg["endpoint"], cfg["access_key"], cfg["secret_key"],
                              cfg["region"])


def _dest_key(rep: BucketReplication, key: str) -> str:
    prefix = rep.target.prefix.strip("/")
    return f"{prefix}/{key}" if prefix else key


def _copy_version(rep, src, dst, change: dict) -> int:
    """Copy one version; return its size (0 if it was deleted on the source meanwhile)."""
    try:
        obj = src.get_object(Bucket=rep.bucket, Key=change["key"],
                             VersionId=change["version_id"])
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        if code in ("NoSuchVersion", "NoSuchKey"):
            return 0  # removed since it was listed: nothing left to replicate
        if code == "InvalidObjectState":
            raise BucketReplicationFailed(
                f"version {change['version_id']} of {change['key']} is in an archive storage "
                "class (moved there by a lifecycle rule before it was replicated); restore "
                "it with RestoreObject and the next run copies it") from exc
        raise
    extra = {"Metadata": obj.get("Metadata") or {}}
    for src_field, dst_field in HEADERS.items():
        if obj.get(src_field):
            extra[dst_field] = obj[src_field]
    if obj.get("TagCount"):
        tags = src.get_object_tagging(Bucket=rep.bucket, Key=change["key"],
                                      VersionId=change["version_id"])["TagSet"]
        extra["Tagging"] = urlencode([(t["Key"], t["Value"]) for t in tags])
    body = obj["Body"]
    key = _dest_key(rep, change["key"])
    try:
        stream = iobudget.throttle(body.iter_chunks(MiB), "replication")
        if change["size"] < TRANSFER.multipart_threshold:
            # one PutObject (upload_fileobj costs several ms more per object)
            dst.put_object(Bucket=rep.target.bucket, Key=key, Body=b"".join(stream), **extra)
        else:
            dst.upload_fileobj(_Reader(stream), rep.target.bucket, key, ExtraArgs=extra,
                               Config=TRANSFER)
    finally:
        body.close()
    return change["size"]


def run_bucket_replication(rep: BucketReplication,
                           progress=lambda pct, msg, **counts: None) -> dict:
    """One run (see the module doc); the outcome is recorded on the row."""
    return recorded_run(f"bucket-replication:{rep.name}", rep, _run, progress)


def _apply(rep, src, dst, changes: list) -> tuple[int, int, int]:
    """Apply one key's changes in order (in a worker thread): (versions, deletes, bytes)."""
    versions = deletes = size = 0
    try:
        for change in changes:
            try:
                if change["marker"]:
                    dst.delete_object(Bucket=rep.target.bucket, Key=_dest_key(rep, change["key"]))
                    deletes += 1
                else:
                    size += _copy_version(rep, src, dst, change)
                    versions += 1
            except (BotoCoreError, ClientError) as exc:
                raise BucketReplicationFailed(
                    f"copying {change['key']} (version {change['version_id']}) to "
                    f"{rep.target.bucket}/{_dest_key(rep, change['key'])} on "
                    f"{rep.target.endpoint_url}: {exc}") from exc
    finally:
        db.connection.close()  # the I/O budget may have read its settings in this thread
    return versions, deletes, size


def _run(rep: BucketReplication, progress) -> dict:
    admin = admin_client(timeout=60)
    src, dst = _source_client(), s3_for(rep.target)
    start = watermark = BucketReplication.objects.get(pk=rep.pk).watermark
    totals = [0, 0, 0]  # versions, deletes, bytes
    end = None
    progress(1, f"changes of bucket {rep.bucket} since {_when(start) if start else 'the start'}")
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix=f"bucket-repl-{rep.name}") as pool:
        try:
            while True:
                feed = admin_call(admin.changes, rep.bucket, watermark, limit=PAGE)
                end = end or feed.get("upto", feed["horizon"])
                watermark = _apply_page(rep, src, dst, pool, feed["changes"], watermark,
                                        totals, lambda w: progress(
                                            min(99.0, 2 + 97 * (w - start) / max(1, end - start)),
                                            f"{totals[0]} versions ({totals[2]} bytes) and "
                                            f"{totals[1]} deletes copied", done=totals[2]))
                watermark = max(watermark, feed["horizon"])
                if not feed["truncated"]:
                    break
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    versions, deletes, size = totals
    synced = datetime.fromtimestamp(watermark / 1e9, UTC) if watermark else timezone.now()
    BucketReplication.objects.filter(pk=rep.pk).update(
        watermark=watermark, synced_at=synced, state="ok", error="", last_run_at=timezone.now(),
        last_versions=versions, last_deletes=deletes, last_bytes=size)
    rep.refresh_from_db()
    return {"bucket": rep.bucket, "target": f"{rep.target.bucket}/{rep.target.prefix}",
            "versions": versions, "deletes": deletes, "bytes": size, "watermark": watermark,
            "lag_seconds": rep.lag_seconds()}


def _apply_page(rep, src, dst, pool, changes: list, watermark: int, totals: list,
                report) -> int:
    """Apply a page of changes, ``PARALLEL`` keys at a time (each key's changes in order);
    the watermark advances (and is saved) over the changes done without a gap."""
    groups: dict[str, list] = {}
    for change in changes:
        groups.setdefault(change["key"], []).append(change)
    futures = {pool.submit(_apply, rep, src, dst, group): group for group in groups.values()}
    done, pos, failure = set(), 0, None
    for future in as_completed(futures):
        try:
            counts = future.result()
        except Exception as exc:  # noqa: BLE001 - the first failure is raised below
            failure = failure or exc
            for other in futures:
                other.cancel()
            continue
        for i, n in enumerate(counts):
            totals[i] += n
        done.update(c["seq"] for c in futures[future])
        while pos < len(changes) and changes[pos]["seq"] in done:
            pos += 1
        if pos and changes[pos - 1]["seq"] > watermark:
            watermark = changes[pos - 1]["seq"]
            BucketReplication.objects.filter(pk=rep.pk).update(watermark=watermark)
        report(watermark)
    if failure is not None:
        raise BucketReplicationFailed(
            f"{failure}; {totals[0]} versions and {totals[1]} deletes were copied, the next "
            "run resumes from there") from failure
    return watermark


def _when(seq: int) -> str:
    return datetime.fromtimestamp(seq / 1e9, UTC).isoformat(timespec="seconds")
