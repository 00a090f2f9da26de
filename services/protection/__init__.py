"""Data protection: snapshot schedules, replication to a peer appliance, backup to S3.

REST resources (all under /api/v1/, operators and admins write, everyone reads):

- ``snapshot-schedules/`` ``{name, filesystem|volume, cron|every_minutes, keep_last,
  keep_hourly, keep_daily, keep_weekly, enabled}``; ``POST .../<name>/run/`` → 202 Job.
  Each row owns a django-celery-beat PeriodicTask ``protection:schedule:<name>`` (task
  ``protection.run_schedule``, args ``[id]``), created, changed and deleted with the row.
  Runs take ``auto-<name>-YYYYmmdd-HHMMSS`` (UTC) and prune only their own snapshots, never
  one with clones or one a replication or backup builds on (``schedules.protected_snapshot_names``).
- ``replication-peers/`` ``{name, url, token}`` (the token of an operator on the peer,
  checked by calling the peer's ``/api/v1/me/``; never shown again, sealed in the database
  by ``fields.SealedTextField``); ``POST .../check/``.
- ``replications/`` ``{name, filesystem|volume, peer, target_pool, target_name,
  every_minutes}``: ``lag_seconds`` is the recovery point; ``POST .../sync/`` → 202 Job.
- On the receiving appliance: ``replicas/`` (what peers replicate here; ``POST
  .../<name>/promote/ {name}`` = failover) and ``replica-transfers/`` (the wire protocol).
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
(``services.tiering.budget``) under the job classes ``replication`` and ``backup``.
"""
