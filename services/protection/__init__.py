"""Data protection: snapshot schedules, replication to a peer appliance, backup to S3,
bucket snapshots and bucket replication.

REST resources (all under /api/v1/, operators and admins write, everyone reads):

- ``snapshot-schedules/`` ``{name, filesystem|volume|bucket, cron|every_minutes, keep_last,
  keep_hourly, keep_daily, keep_weekly, enabled}``; ``POST .../<name>/run/`` → 202 Job.
  Each row owns a django-celery-beat PeriodicTask ``protection:schedule:<name>`` (task
  ``protection.run_schedule``, args ``[id]``), created, changed and deleted with the row.
  Runs take ``auto-<name>-YYYYmmdd-HHMMSS`` (UTC) and prune only their own snapshots, never
  one with clones or one a replication or backup builds on (``schedules.protected_snapshot_names``),
  nor a bucket snapshot a restore is reading from. A bucket schedule needs versioning
  Enabled on the bucket (409 otherwise, saying how; it is not turned on behind the user's
  back, since it changes what every overwrite keeps).
- ``bucket-snapshots/`` (``?bucket=``) ``{bucket, name?}`` → 201 ``{id: "<bucket>/<name>",
  bucket, name, created_at, objects, bytes}``; ``GET``/``DELETE .../<bucket>/<name>/``;
  ``POST .../<bucket>/<name>/restore/ {bucket}`` → 202 Job copying the snapshot's versions
  into a new bucket (409 if it exists, unless it is a cut-short restore of the same
  snapshot, which resumes). Bucket snapshots are manifests of versions kept and held by the
  S3 gateway (``bucket_snapshots.py``; ``services/object/gateway/snapshots.py``): a held
  version survives DeleteObject with its versionId (S3 ``AccessDenied`` "held by snapshot
  X") and lifecycle noncurrent expiration; plain deletes add delete markers as usual.
- ``bucket-replications/`` ``{name, bucket, target, every_minutes}`` (``target`` a backup
  target: endpoint, keys, bucket, prefix) with ``POST .../sync/`` → 202 Job: versions and
  delete markers written since the ``watermark`` (the gateway's change feed) are copied in
  order with their metadata, deletes as deletes; ``lag_seconds`` is the recovery point
  (``bucket_replication.py`` says why a target and not a peer).
- ``replication-peers/`` ``{name, url, token}`` (the token of an operator on the peer,
  checked by calling the peer's ``/api/v1/me/``; never shown again, sealed in the database
  by ``fields.SealedTextField``); ``POST .../check/``.
- ``replications/`` ``{name, filesystem|volume, peer, target_pool, target_name,
  every_minutes}``: ``lag_seconds`` is the recovery point; ``POST .../sync/`` → 202 Job.
  ``POST .../failback/`` → 202 Job (``strata replication failback NAME``), after a failover
  on the peer: the promoted copy's increment on the newest common snapshot is pulled here
  (resumable, checked, applied whole), this side's own writes since are kept in snapshot
  ``failback-<name>-<time>``, the source is rolled back in place onto the pulled snapshot
  (same name and path, exports keep serving), and the peer's replica is re-based on it, so
  the next sync is incremental (``failback.py``). 409 when the replica was not promoted,
  when no snapshot is common, or while a sync or failback of it runs; 502 if the peer does
  not answer. ``failback`` on the row shows the step of one cut short (run it again); syncs
  wait (409) until it is complete, or until ``{"abandon": true}`` forgets it.
- On the receiving appliance: ``replicas/`` (what peers replicate here; ``POST
  .../<name>/promote/ {name}`` = failover) and ``replica-transfers/`` (the wire protocol);
  for failback, called by the original side: ``POST .../<name>/failback-snapshot/
  {snapshot}``, ``GET .../<name>/failback-stream/?snapshot=&parent=&offset=`` (the send
  stream from ``offset``, then ``STRATA-SHA256:<hex of the whole stream>``) and ``POST
  .../<name>/rebase/ {snapshot}``.
- ``backup-targets/`` ``{name, endpoint_url, region, access_key, secret_key, bucket,
  prefix}`` (``secret_key`` write-only and sealed in the database like peer tokens);
  ``backups/`` ``{name, filesystem|volume, target, every_minutes, full_every}``
  with ``POST .../run/``; ``restore-points/`` (the catalog, ``?backup=``) with ``POST
  .../<id>/restore/ {name, pool?}`` → 202 Job; ``DELETE`` removes a leaf and its objects.

Replication wire protocol (``peerclient.py`` ↔ ``receiver.py``), all with ``Authorization:
Token``: ``POST replica-transfers/ {kind, pool, name, snapshot, parent, source}`` → ``{id,
received, chunk_bytes}``; ``PUT replica-transfers/<id>/data/?offset=N`` with an
``application/octet-stream`` body of at most ``chunk_bytes`` (appended to a spool file on
the peer, fsynced; a wrong offset is 409 with the right one); ``GET replica-transfers/<id>/``
says how much arrived (a cut link resumes from there); ``POST replica-transfers/<id>/commit/
{bytes, sha256}`` checks the whole stream and only then applies it with the dataplane's
``receive_snapshot``. Chunks are bounded by Django's in-memory body limit because the audit
middleware reads every /api/ body (see the report of issue 7).

Every long run is a Job (``tasks.py``); background streams draw from the shared I/O budget
(``plane.iobudget``) under the job classes ``replication`` (also bucket
replication) and ``backup``. A bucket restore is copied inside the S3 gateway and does not
draw from it.
"""
