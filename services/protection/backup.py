"""Backups to S3: targets (checked by listing their bucket), runs (full, then increments
on the last backed-up snapshot), the catalog of restore points, and restore to a new file
system or volume that is verified against the source's tree digest before it is kept."""
import logging
import secrets

from botocore.exceptions import BotoCoreError, ClientError
from django.db import transaction
from django.utils import timezone

from plumbing.errors import Conflict
from dataplane.errors import InvalidArgument
from services.protection import beat, objstore
from services.protection.locks import recorded_run
from services.protection.models import Backup, BackupTarget, RestorePoint
from plumbing.progress import Meter
from plumbing.treedigest import tree_digest
from services.protection.replication import unique_snapshot_name
from services.storage import service as storage
from services.storage.drivers import delete_if_present, driver_for
from services.storage.models import OBJECT_MODELS, FileSystem, Pool, Volume
from plane import iobudget

log = logging.getLogger(__name__)
TASK = "protection.run_backup"


class BackupFailed(Exception):
    """A backup or restore did not complete; the message says why."""


def s3_for(target: BackupTarget):
    return objstore.s3_client(target.endpoint_url, target.access_key, target.secret_key,
                              target.region)


def check_target(target: BackupTarget) -> None:
    """Raise InvalidArgument unless the target's bucket answers with these keys."""
    try:
        s3_for(target).list_objects_v2(Bucket=target.bucket, MaxKeys=1)
    except (BotoCoreError, ClientError) as exc:
        raise InvalidArgument(f"backup target {target.endpoint_url} bucket {target.bucket}: "
                              f"{exc}; check the URL, keys and that the bucket exists")


def _key(backup: Backup, snapshot: str) -> str:
    prefix = backup.target.prefix.strip("/")
    return "/".join(p for p in (prefix, backup.name, snapshot) if p)


# -- backups -------------------------------------------------------------------------------

_scheduled = beat.Scheduled(Backup, "backup", TASK)
update_backup = _scheduled.update


def create_backup(**fields) -> Backup:
    source = fields.get("filesystem") or fields.get("volume")
    fields.update(source_name=source.name,
                  source_kind="filesystem" if fields.get("filesystem") else "volume")
    return _scheduled.create(**fields)


def delete_backup(backup: Backup) -> None:
    """Forget a backup and its catalog; its objects stay in the bucket (delete restore
    points first to remove those)."""
    with transaction.atomic():
        beat.delete_periodic_task(backup)
        if backup.source is not None:
            for snap in backup.source_snapshots().filter(
                    name__startswith=backup.snapshot_prefix):
                if not snap.clones():
                    storage.delete_snapshot(snap)
        RestorePoint.objects.filter(backup=backup).update(parent=None)
        backup.delete()


def _base(backup: Backup):
    """The restore point to build the next increment on, or None for a full."""
    last = backup.restore_points.order_by("-created_at", "-id").first()
    if last is None or not backup.source_snapshots().filter(name=last.snapshot).exists():
        return None
    if backup.full_every and len(last.chain()) > backup.full_every:
        return None
    return last


def run_backup(backup: Backup, progress=lambda pct, msg, **counts: None) -> dict:
    """One backup run: snapshot, stream (incremental when a base exists), catalog."""
    result = recorded_run(f"backup:{backup.name}", backup, _run, progress)
    Backup.objects.filter(pk=backup.pk).update(state="ok", error="",
                                               last_run_at=timezone.now())
    return result


def _run(backup: Backup, progress) -> dict:
    source, target = backup.source, backup.target
    if source is None:
        raise BackupFailed(f"{backup.source_kind} {backup.source_name} of backup "
                           f"{backup.name} was deleted; its restore points can still be "
                           "restored, but there is nothing more to back up.")
    drv = driver_for(source.pool.driver)
    s3 = s3_for(target)
    _remove_orphans(backup, s3)
    base = _base(backup)
    name = unique_snapshot_name(
        source, f"{backup.snapshot_prefix}{timezone.now().strftime('%Y%m%d-%H%M%S')}",
        taken=set(backup.restore_points.values_list("snapshot", flat=True)))
    snap = storage.create_snapshot(name=name, **{backup.kind: source})
    key = _key(backup, name)
    try:
        progress(2, f"digest of {source.name}@{name}")
        tree = tree_digest(snap.path)
        estimate = max(1, source.used_bytes if base is None else source.used_bytes // 10)
        kind = "incremental on " + base.snapshot if base else "full"
        progress(10, f"sending {name} ({kind})")
        meter = Meter("backed up", estimate)
        stream = iobudget.throttle(drv.send_snapshot(source.pool.name, backup.kind, source.name,
                                                   name, base.snapshot if base else None),
                                 "backup")
        # the text counts bytes uploaded (in the bucket); the job's bytes count those read
        # from the stream, a few chunks ahead, which move at the budget's rate
        read = [0]

        def counted():
            for chunk in stream:
                read[0] += len(chunk)
                yield chunk
        try:
            fields = objstore.put_stream(
                s3, target.bucket, key, counted(),
                progress=lambda done: progress(meter.pct(read[0], 10, 95), meter.text(done),
                                               **meter.counts(read[0])))
        finally:
            stream.close()  # stops `btrfs send` now, not when the generator is collected
        manifest = {"format": 1, "backup": backup.name, "snapshot": name,
                    "parent": base.snapshot if base else None, "kind": backup.kind,
                    "source": source.name, "tree_sha256": tree,
                    "created": timezone.now().isoformat(), **fields}
        objstore.put_manifest(s3, target.bucket, f"{key}/manifest.json", manifest)
    except BaseException:
        try:
            objstore.delete_prefix(s3, target.bucket, key)
        except Exception as exc:  # the run's own error matters more; say what stays behind
            log.warning("backup %s: could not remove partial upload %s: %s",
                        backup.name, key, exc)
        storage.delete_snapshot(snap)
        raise
    rp = RestorePoint.objects.create(
        backup=backup, snapshot=name, parent=base, kind=backup.kind,
        key=f"{key}/manifest.json", chunks=len(fields["chunks"]),
        stream_bytes=fields["stream_bytes"], stored_bytes=fields["stored_bytes"],
        stream_sha256=fields["stream_sha256"], tree_sha256=tree)
    # only the newest backed-up snapshot is needed on the source (the next increment's base)
    for old in backup.source_snapshots().filter(
            name__startswith=backup.snapshot_prefix).exclude(name=name):
        if not old.clones():
            try:
                storage.delete_snapshot(old)
            except Exception as exc:  # the backup is done; a leftover is retried next run
                log.warning("backup %s: could not delete old snapshot %s: %s",
                            backup.name, old.name, exc)
    return {"restore_point": rp.pk, "snapshot": name, "full": base is None,
            "stream_bytes": rp.stream_bytes, "stored_bytes": rp.stored_bytes,
            "chunks": rp.chunks}


def _remove_orphans(backup: Backup, s3) -> None:
    """Delete uploads of runs that never reached the catalog (a worker killed mid-run)."""
    target = backup.target
    known = set(backup.restore_points.values_list("snapshot", flat=True))
    root = _key(backup, "").rstrip("/")
    for name in objstore.child_prefixes(s3, target.bucket, root):
        if name not in known:
            n = objstore.delete_prefix(s3, target.bucket, f"{root}/{name}")
            log.info("backup %s: removed %d objects of unfinished run %s", backup.name, n, name)


def delete_restore_point(rp: RestorePoint) -> None:
    """Delete a restore point and its objects; one that increments build on cannot go."""
    children = list(rp.children.values_list("snapshot", flat=True))
    if children:
        raise Conflict(f"restore point {rp} is the base of {', '.join(children)}; "
                       "delete those first.")
    target = rp.backup.target
    objstore.delete_prefix(s3_for(target), target.bucket, rp.key.rsplit("/", 1)[0])
    rp.delete()


# -- restore -------------------------------------------------------------------------------

def restore(rp: RestorePoint, *, name: str, pool: Pool,
            progress=lambda pct, msg, **counts: None):
    """Restore ``rp`` as a new file system or volume ``name`` in ``pool``: receive the
    chain (full, then increments) into a staging object, clone its newest snapshot as
    ``name``, and keep it only if its tree digest equals the source's at backup time."""
    model = OBJECT_MODELS[rp.kind]
    if model.objects.filter(name=name).exists():
        raise Conflict(f"{rp.kind} {name} already exists; restore under another name.")
    target = rp.backup.target
    s3 = s3_for(target)
    drv = driver_for(pool.driver)
    chain = rp.chain()
    staging = f"restore-{secrets.token_hex(4)}"
    total = sum(p.stream_bytes for p in chain) or 1
    done_before = 0
    meter = Meter("restored", total)
    try:
        for i, point in enumerate(chain):
            manifest = objstore.get_manifest(s3, target.bucket, point.key)
            if manifest["stream_sha256"] != point.stream_sha256:
                raise BackupFailed(f"the manifest of {point} in the bucket is not the one in "
                                   "the catalog; the bucket was changed")
            base = done_before
            stream = objstore.read_stream(
                s3, target.bucket, manifest,
                progress=lambda done, base=base: progress(meter.pct(base + done, 0, 90),
                                                          meter.text(base + done),
                                                          **meter.counts(base + done)))
            drv.receive_snapshot(pool.name, rp.kind, staging, stream, point.snapshot)
            done_before += point.stream_bytes
        progress(92, "verifying")
        info = drv.clone_snapshot(pool.name, rp.kind, staging, rp.snapshot, name)
        got = tree_digest(info.path)
        if got != rp.tree_sha256:
            delete_if_present(drv, pool.name, rp.kind, name)
            raise BackupFailed(f"the restored {rp.kind} does not match the source's digest "
                               f"({got[:12]} != {rp.tree_sha256[:12]}); nothing was kept")
    finally:
        delete_if_present(drv, pool.name, rp.kind, staging)
    if rp.kind == "filesystem":
        obj = FileSystem.objects.create(name=name, pool=pool, path=info.path,
                                        used_bytes=info.used_bytes)
    else:
        obj = Volume.objects.create(name=name, pool=pool, path=info.path,
                                    size_bytes=info.size_bytes, used_bytes=info.used_bytes)
    progress(100, f"restored {rp} as {name}")
    return obj, got
