"""Bucket snapshots from the plane: take, list, delete, restore, and the runs of schedules
whose source is a bucket.

Objects of all buckets share segment files, so a bucket snapshot is not a btrfs snapshot:
the S3 gateway records a manifest of the bucket's current versions (key -> version id) at
one instant and holds those versions (``services/object/gateway/snapshots.py``). The plane
keeps no rows for them; it asks the gateway through its admin interface. A snapshot needs
versioning Enabled on the bucket: the plane refuses with 409 and says how to enable it
rather than turning versioning on by itself (that changes what every overwrite costs).

A schedule run takes ``auto-<schedule>-YYYYmmdd-HHMMSS`` (UTC) and prunes the schedule's
older snapshots by its retention (``retention.py``), never one a restore is reading from.
A restore copies a snapshot's versions into a new bucket (made by the plane, same owner,
versioning Enabled) page by page, as a Job with progress; run again after a failure, it
resumes (keys already copied are skipped).
"""
from datetime import UTC, datetime

from plumbing.errors import Conflict, Invalid, NotFound
from plumbing.progress import Meter
from services.object.public import Bucket, admin_call, admin_client, create_bucket, refresh_usage
from services.protection.models import SnapshotSchedule
from services.protection import retention
from services.protection.retention import Retention



def _client(timeout: float = 30.0):
    """The gateway's admin interface; calls go through ``admin_call``, which maps its
    refusals to domain errors."""
    return admin_client(timeout=timeout)


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def bucket_info(name: str) -> dict:
    """The gateway's view of bucket ``name`` (404 if it has none)."""
    return admin_call(_client().get_bucket, name)


def require_versioned(name: str) -> dict:
    """Bucket ``name`` with versioning Enabled, or 409 saying how to get there."""
    try:
        info = bucket_info(name)
    except NotFound:
        raise Invalid(f"bucket: There is no bucket {name}.") from None
    if info["versioning"] != "Enabled":
        raise Conflict(
            f"Bucket {name} has versioning {info['versioning']}; a bucket snapshot holds object "
            f"versions, so enable versioning first (PATCH /api/v1/buckets/{name}/ "
            f'{{"versioning": "Enabled"}} or `strata bucket versioning {name} Enabled`).',
            code="versioning_required")
    return info


def _view(bucket: str, snap: dict) -> dict:
    return {"id": f"{bucket}/{snap['name']}", "bucket": bucket, "name": snap["name"],
            "created_at": _when(snap["created"]), "objects": snap["objects"],
            "bytes": snap["bytes"]}


def list_snapshots(bucket: str | None = None) -> list[dict]:
    """Snapshots of ``bucket`` (or of every bucket that has some), oldest first."""
    client = _client()
    names = [bucket] if bucket else [b["name"] for b in admin_call(client.list_buckets)
                                     if b.get("snapshots")]
    out = []
    for name in names:
        out += [_view(name, s) for s in admin_call(client.list_snapshots, name)]
    return sorted(out, key=lambda s: (s["created_at"], s["id"]))


def get_snapshot(bucket: str, name: str) -> dict:
    return _view(bucket, admin_call(_client().get_snapshot, bucket, name))


def take(bucket: str, name: str) -> dict:
    """Take snapshot ``name`` of ``bucket`` now (409 unless versioning is Enabled)."""
    require_versioned(bucket)
    return _view(bucket, admin_call(_client(timeout=300).create_snapshot, bucket, name))


def delete(bucket: str, name: str) -> None:
    """Delete a snapshot; the versions it held may be deleted again (409 while a restore
    reads from it)."""
    admin_call(_client().delete_snapshot, bucket, name)


def in_restore() -> set:
    """(bucket, snapshot) pairs a restore is still copying from."""
    return {(b["restoring"]["bucket"], b["restoring"]["snapshot"])
            for b in admin_call(_client().list_buckets) if b.get("restoring")}


# -- schedules -----------------------------------------------------------------------------

def unique_name(bucket: str, prefix: str, now) -> str:
    """``<prefix><UTC time to the second>``, or with ``-2``, ``-3``... when the bucket has a
    snapshot of that name already (two in one second)."""
    taken = {s["name"] for s in admin_call(_client().list_snapshots, bucket)}
    base = f"{prefix}{now.strftime('%Y%m%d-%H%M%S')}"[:63]
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[:60]}-{n}"
    return name


def prune(schedule: SnapshotSchedule) -> list[str]:
    """Delete the schedule's snapshots its retention lets go; return their names."""
    policy = Retention.of(schedule)
    if not policy.keeps_anything():
        return []  # a schedule without retention keeps everything
    client = _client()
    mine = [s for s in admin_call(client.list_snapshots, schedule.bucket)
            if s["name"].startswith(schedule.snapshot_prefix)]
    busy = {snap for bucket, snap in in_restore() if bucket == schedule.bucket}
    return retention.prune(
        f"schedule {schedule.name}",
        [(s["name"], datetime.fromtimestamp(s["created"], UTC)) for s in mine], policy,
        lambda name: admin_call(client.delete_snapshot, schedule.bucket, name),
        protected=[s["name"] for s in mine if s["name"] in busy])


def take_scheduled_bucket_snapshot(schedule: SnapshotSchedule, now,
                                   progress=lambda pct, msg: None) -> dict:
    """Snapshot the schedule's bucket and prune by its retention."""
    progress(10, f"snapshot of bucket {schedule.bucket}")
    snap = take(schedule.bucket, unique_name(schedule.bucket, schedule.snapshot_prefix, now))
    progress(60, "pruning")
    pruned = prune(schedule)
    kept = [s["name"] for s in admin_call(_client().list_snapshots, schedule.bucket)
            if s["name"].startswith(schedule.snapshot_prefix)]
    return {"snapshot": snap["name"], "bucket": schedule.bucket, "objects": snap["objects"],
            "pruned": pruned, "kept": kept}


# -- restore -------------------------------------------------------------------------------

def check_restore_target(bucket: str, name: str, target: str) -> None:
    """Refuse (409) a target that exists, unless it is a cut-short restore of this snapshot."""
    admin_call(_client().get_snapshot, bucket, name)  # 404 if there is no such snapshot
    if target == bucket:
        raise Invalid("bucket: Restore into a new bucket, not into the source.")
    if Bucket.objects.filter(name=target).exists():
        try:
            info = bucket_info(target)
        except NotFound:
            return
        if info.get("restoring") != {"bucket": bucket, "snapshot": name}:
            raise Conflict(f"Bucket {target} already exists; restore into a new bucket.",
                           code="exists")


def restore(bucket: str, name: str, target: str,
            progress=lambda pct, msg, **counts: None) -> dict:
    """Copy snapshot ``name`` of ``bucket`` into the new bucket ``target`` (see module doc)."""
    client = _client(timeout=600)
    snap = admin_call(client.get_snapshot, bucket, name)
    if not Bucket.objects.filter(name=target).exists():
        owner = bucket_info(bucket)["owner"]
        create_bucket(name=target, owner=owner, versioning=Bucket.Versioning.ENABLED)
    meter = Meter("restored", snap["bytes"])
    after, copied, skipped, done_bytes = "", 0, 0, 0
    progress(1, f"restoring {bucket}@{name} ({snap['objects']} objects) into {target}")
    while True:
        page = admin_call(client.restore_snapshot_page, bucket, name, target, after=after)
        copied += page["copied"]
        skipped += page["skipped"]
        done_bytes += page["bytes"]
        progress(min(99.0, 100.0 * (copied + skipped) / max(1, snap["objects"])),
                 f"{copied + skipped} of {snap['objects']} objects; " + meter.text(done_bytes),
                 **meter.counts(done_bytes))
        if page["done"]:
            break
        after = page["next"]
    refresh_usage(Bucket.objects.filter(name=target))
    return {"bucket": target, "source": f"{bucket}/{name}", "objects": snap["objects"],
            "copied": copied, "skipped": skipped, "bytes": done_bytes}
