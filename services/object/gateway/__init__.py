"""Strata's S3-compatible gateway: an ASGI app (uvicorn + uvloop + httptools), no Django.

Run::

    python -m services.object.gateway --config CONFIG.json --host 127.0.0.1 --port 9000

Config contract (written by the management plane, atomically: write a temporary file in the
same directory, fsync, rename over CONFIG.json). The gateway stats the file on each request
and re-reads it when its mtime changes, so no database is queried per request; a file that
does not parse is logged and the previous configuration stays in force::

    {
      "data_root": "/pools/flash/s3",     # directory on a dataplane pool: buckets, indexes,
                                          # segments (fixed for the gateway's lifetime)
      "region": "us-east-1",              # SigV4 region and GetBucketLocation answer
      "admin_token": "long-random",       # Bearer token for /_strata/admin/ ('' disables it)
      "domains": ["localhost"],           # optional: virtual-host style for <bucket>.<domain>
      "segment_bytes": 268435456,         # optional: small-object segment size (read at start)
      "compaction_interval": 60,          # optional: seconds between segment compactions
      "lifecycle_interval": 3600,         # optional: seconds between lifecycle passes (0: none,
                                          # the plane runs them)
      "lifecycle_day_seconds": 86400,     # optional: length of a lifecycle "day" (tests only)
      "io_budget_redis": "redis://...",   # optional: the shared I/O budget's Redis; object
                                          # PUT/GET mark foreground traffic there (.foreground)
      "cold_root": "/pools/capacity/s3",  # optional: existing directory on the capacity pool,
                                          # where lifecycle transitions put cold bytes
      "io_budget": {                      # optional: lifecycle transitions draw from the
        "rate": 0, "burst": 0,            # budget at io_budget_redis (class "migration"):
        "classes": {"migration": 0},      # bytes/s and bytes, 0 = unlimited, as in
        "foreground_share": 0.1},         # plumbing.iobudget; absent: unthrottled
      "users": {
        "<access_key>": {"secret_key": "...", "user": "alice", "admin": false}
      }
    }

``user`` is the owner name recorded on buckets the key creates; a key may use only buckets
owned by its user, unless ``admin`` is true (then it sees every bucket) or a bucket policy
grants it (see :mod:`.policy`: Allow/Deny by principal = user name, action, resource).
Buckets live in the gateway's storage, created by S3 CreateBucket or by the admin interface.

Admin interface, same port, JSON in and out, ``Authorization: Bearer <admin_token>``:

=======  =======================================  ==============================================
GET      /_strata/admin/health                    {"status": "ok", "buckets": N}
GET      /_strata/admin/buckets                   {"buckets": [BUCKET, ...]}
POST     /_strata/admin/buckets                   {"name", "owner", ["versioning"], ["quota"]}
                                                  -> 201 BUCKET; 409 BucketAlreadyExists /
                                                  BucketAlreadyOwnedByYou; 400 InvalidBucketName
GET      /_strata/admin/buckets/NAME              BUCKET (404 NoSuchBucket)
DELETE   /_strata/admin/buckets/NAME              204; 409 BucketNotEmpty
GET/PUT  /_strata/admin/buckets/NAME/quota        {"bytes": int|null, "objects": int|null}
GET/PUT  /_strata/admin/buckets/NAME/versioning   {"status": "Enabled"|"Suspended"|"Disabled"}
                                                  (Suspended: 409 InvalidBucketState while the
                                                  bucket has snapshots)
GET      /_strata/admin/buckets/NAME/snapshots    {"snapshots": [SNAPSHOT, ...]} (oldest first)
POST     /_strata/admin/buckets/NAME/snapshots    {"name"} -> 201 SNAPSHOT; 409
                                                  InvalidBucketState unless versioning Enabled,
                                                  409 SnapshotAlreadyExists
GET      /_strata/admin/buckets/NAME/snapshots/S  SNAPSHOT (404 NoSuchSnapshot); with
                                                  ?entries=1[&after=KEY&max_keys=N] also
                                                  "entries": [{"key","version_id","size","etag"}]
DELETE   /_strata/admin/buckets/NAME/snapshots/S  204 (its versions are no longer held); 409
                                                  while a restore reads from it
POST     /_strata/admin/buckets/NAME/snapshots/   {"target", ["after"], ["max_keys"], ["max_bytes"]}
         S/restore                                -> copies the next page into the existing
                                                  bucket target: {"copied", "skipped", "bytes",
                                                  "next", "done", "total"}
GET      /_strata/admin/buckets/NAME/changes      ?after=SEQ&limit=N: versions and delete markers
                                                  written after SEQ, oldest first: {"horizon",
                                                  "upto", "truncated", "changes": [{"key","version_id",
                                                  "seq","marker","size","etag"}]}
POST     /_strata/admin/compact                   run segment compaction now -> counts
POST     /_strata/admin/lifecycle                 run the lifecycle pass now -> counts
POST     /_strata/admin/gc?min_age=600            remove unreferenced large-object files -> counts
=======  =======================================  ==============================================

BUCKET is ``{"name", "owner", "created" (epoch s), "versioning": "Enabled"|"Suspended"|
"Disabled", "quota": {"bytes"?, "objects"?}, "bytes", "objects", "snapshots" (count),
"restoring": null|{"bucket", "snapshot"}}``; usage counts every stored version (not delete
markers). SNAPSHOT is ``{"name", "created", "objects", "bytes"}``. Errors: ``{"error": CODE,
"message": TEXT}`` with the S3 status of CODE (403 AccessDenied for a wrong token). A PUT over
quota gets S3 error ``QuotaExceeded`` (403).

Storage: objects below 128 KiB are appended to shared segment files and made durable by a
group commit (one fdatasync of the segment plus one SQLite transaction per touched index
shard covers every PUT that arrived meanwhile); larger bodies stream to their own file,
created at its final path (nothing refers to it before its index entry, so no rename) and
written with O_DIRECT where the file system takes it (one fsync of the file, one of its
directory). The index entry, written last, through the same group commit, is what makes an
object exist, so a crash leaves the old or the new version, never a partial one. Every version
records its tier: ``hot`` (data root) or ``cold`` (``cold_root``, moved there by lifecycle
transitions; see :mod:`.tiers` for the storage classes, what GET does with each, and
RestoreObject). Segments whose live bytes fall under half are compacted in the background.

Bucket snapshots (:mod:`.snapshots`): a durable manifest of the current versions at one
instant; the versions it names are held (DeleteObject with their versionId and lifecycle
noncurrent expiration leave them, the former with ``AccessDenied`` "held by snapshot X");
restore copies them into another bucket page by page. The change feed lists what was
written after a sequence number, up to a horizon below which every write is committed, so
bucket replication can copy incrementally from a watermark.

Lifecycle: expiration (days, date, expired delete markers), noncurrent-version expiration,
abort of incomplete multipart uploads, transitions and noncurrent-version transitions to the
capacity tier (STANDARD_IA, ONEZONE_IA, GLACIER_IR read transparently; GLACIER, DEEP_ARCHIVE
need RestoreObject), by prefix. Without ``cold_root`` a transition rule is refused with
``InvalidStorageClass``. Multipart uploads keep the COMPOSITE checksum of their parts'
x-amz-checksum-* (``-N`` suffix; HEAD/GET with ChecksumMode=ENABLED, GetObjectAttributes).
Not implemented yet: policy Conditions, bucket tagging, ACLs (answered ``NotImplemented`` /
``MalformedPolicy``) and FULL_OBJECT checksums of multipart uploads (``NotImplemented``).
Large-object files orphaned by a crash (cut short, or between their fsync and their index
commit) are never listed, and are removed in the background after each start (``/gc``).

Performance (``bench/s3.py``, this 2-core development machine, shared and noisy; medians of 3
runs, peers in the same run; SeaweedFS with its per-path fsync on): PUT 200 x 1 MiB 413 MiB/s
= 0.18x raw disk (new file, write, fsync; 8 writers), 1.6x moto, 3.1x SeaweedFS; multipart
4 x 256 MiB 418 MiB/s = 0.56x raw; 4 KiB PUT, 32 clients, 3,730 ops/s = 7.5x moto, 2.0x
SeaweedFS; GET 1 MiB 0.78x raw (cold). A large PUT is CPU-bound here, not disk-bound: the
gateway spends ~3 ms of CPU per MiB (MD5 alone is 1.2 ms: 812 MiB/s per core), so two whole
cores would top out near 650 MiB/s while the disk takes 2,100-2,300 MiB/s of 1 MiB files with
8 writers; even MD5 on both cores (1,440 MiB/s) stays under 0.8x raw. A 4 KiB PUT waits for
one segment fdatasync then one WAL fsync per touched shard (~7 ms with 32 clients).

Modules: :mod:`.app` (ASGI, routing, auth), :mod:`.sigv4`, :mod:`.body` (aws-chunked),
:mod:`.checksums`, :mod:`.errors` (S3 XML errors), :mod:`.bucket_ops`, :mod:`.object_ops`,
:mod:`.multipart`, :mod:`.admin`, :mod:`.core` (byte paths), :mod:`.storage` (segments,
files), :mod:`.index` (sharded SQLite), :mod:`.commit` (group commit), :mod:`.compaction`,
:mod:`.lifecycle`, :mod:`.tiers` (capacity tier, restores), :mod:`.policy`, :mod:`.buckets`, :mod:`.snapshots`, :mod:`.config`.
"""
