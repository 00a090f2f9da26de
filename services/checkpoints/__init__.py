"""Checkpoint service: the checkpoint path of ARCHITECTURE.md.

REST (all under /api/v1/, token auth; viewers read, operators and admins write):

- `checkpoint-jobs/` CRUD by name: `filesystem` and/or `bucket`, `keep_last`, `keep_every`,
  `keep_newer_than`, `tier_after`, `capacity_pool`, `writing_timeout`.
- `checkpoint-jobs/{job}/latest/`: the newest committed version (404 if none).
- `checkpoint-jobs/{job}/retention-preview/`: what would be deleted and why the rest stays;
  `POST .../retention/` applies it as a job (202); `POST .../scan/` commits DCP/Orbax
  checkpoints found in the job's directory or bucket now.
- `checkpoint-jobs/{job}/versions/`: list; `POST {"step"}` begins (or joins) a version and
  returns its `id`, `path`, `relative_path`, `s3_prefix`, and where the job's file system
  is exported or shared, `nfs_path` (`host:/pseudo/...`) and `smb_path`
  (`\\\\host\\share\\...`) (absent otherwise; a version's GET has them too).
- `.../versions/{id}/commit/` `{"manifest": [{name, size, sha256?|crc32c?}], "location"?}`:
  200 committed, 409 `{"error": "incomplete", "shards": [...]}` naming every bad shard.
- `.../versions/{id}/abort/`, `lease/` `{"ttl_seconds", "holder"}` (starts pre-warm when
  cold), `pin/` `{"reason"}`, `unpin/`, `prewarm/` (202 job, or 200 when already hot),
  `tier-down/` (202 job: move a superseded version to the capacity pool now, whatever
  `tier_after`; 409 with the reason for the latest, a leased, writing, aborted or cold
  version; 400 when the job has no `capacity_pool`).
- `checkpoint-leases/{id}/` GET/DELETE (release), `POST .../renew/`.

Tiering: with `tier_after` and `capacity_pool` set, the periodic task `checkpoints.tier_all`
(beat, every minute) starts one throttled Job per superseded, hot, unleased version
superseded longer than `tier_after` ago: copy to `ckpt-cold-<pool>`, verify, switch, then
release the hot copy (tierdown.py). Pre-warm brings a cold version back (prewarm.py) and
keeps the cold copy; the next tier-down switches back to it without copying while it is
whole. CLI: `strata checkpoint list|versions JOB|tier-down JOB ID|prewarm JOB ID` (cli.py).

Modules, each importing only those below it: tasks (Celery: periodic upkeep, retention
jobs) on top; scanner (commit without the API) and retention; tierdown (to the capacity
pool); service (begin/commit/abort/leases/pins); prewarm (back to the hot pool); models
(catalog), verify, formats and s3source (bytes, no Django) at the bottom. Beside them:
access (NFS/SMB paths), signals (the cold file system is not deleted under cold versions),
and the training-script side without Django: sdk (the client, on plumbing's RestClient),
dcp (its PyTorch DCP writer/reader through the version's directory or its S3 prefix;
imports torch, boto3; the SDK imports it only when used) and sdkerrors (the SDK's errors).
"""
