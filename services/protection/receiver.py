"""The receiving side of replication: transfers spooled to disk chunk by chunk, applied
with the dataplane's ``receive_snapshot`` only when whole and checked, and the replicas
they build (failover makes a writable clone of the newest received snapshot).

Failback, this appliance's part (the original side drives it, see ``failback.py``): the
promoted object is snapshotted on request, its send stream is served from a given offset
(incremental on the newest snapshot both sides have: one of the promoted object's own, or
the replica's received one it was cloned from), and at the end the replica is re-based: a
copy of the last failback snapshot becomes its newest snapshot, standing for the original
as the base of incremental streams, and it accepts forward replication again. The same
spool (``Transfer``) holds what the original side pulls before it applies it whole.
"""
import hashlib
import json
import logging
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from plumbing.errors import Conflict
from dataplane.errors import AlreadyExists, DataplaneError, InvalidArgument, NotFound
from services.protection.models import Replica
from services.protection.peerclient import with_trailer
from services.storage import service as storage
from services.storage.drivers import driver_for
from services.storage.models import OBJECT_MODELS, FileSystem, Pool, Snapshot, Volume
from plane import iobudget

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20
KEEP_RECEIVED = 3  # received snapshots kept per replica (older ones go unless cloned)


def chunk_bytes() -> int:
    """Largest chunk a sender may PUT: under Django's in-memory body limit."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or (8 << 20)
    return max(64 << 10, min(8 << 20, limit - (64 << 10)))


def _incoming_dir() -> Path:
    path = Path(settings.DATA_DIR) / "protection" / "incoming"
    path.mkdir(parents=True, exist_ok=True)
    return path


class Transfer:
    """A spooled transfer: ``<id>.json`` (what it is) and ``<id>.part`` (bytes so far)."""

    def __init__(self, transfer_id: str):
        if not transfer_id.isalnum():
            raise NotFound(f"no transfer {transfer_id!r}")
        self.id = transfer_id
        self.meta_path = _incoming_dir() / f"{transfer_id}.json"
        self.part_path = _incoming_dir() / f"{transfer_id}.part"
        if not self.meta_path.exists():
            raise NotFound(f"no transfer {transfer_id!r} (finished, discarded or never begun)")
        self.meta = json.loads(self.meta_path.read_text())

    @property
    def received(self) -> int:
        return self.part_path.stat().st_size if self.part_path.exists() else 0

    def as_dict(self) -> dict:
        return {"id": self.id, "received": self.received, "chunk_bytes": chunk_bytes(),
                **self.meta}

    def append(self, offset: int, data: bytes) -> int:
        have = self.received
        if offset != have:
            raise Conflict(f"transfer {self.id} has {have} bytes; send from offset {have}.")
        with open(self.part_path, "ab") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return have + len(data)

    def discard(self) -> None:
        for path in (self.part_path, self.meta_path):
            path.unlink(missing_ok=True)


def _check_target(kind: str, pool_name: str, name: str) -> Pool:
    if kind not in OBJECT_MODELS:
        raise InvalidArgument(f"kind {kind!r}: use 'filesystem' or 'volume'")
    pool = Pool.objects.filter(name=pool_name).first()
    if pool is None:
        raise NotFound(f"no pool {pool_name!r} on this appliance to receive into")
    replica = Replica.objects.filter(name=name).first()
    if replica is None:
        if OBJECT_MODELS[kind].objects.filter(name=name).exists():
            raise Conflict(f"{kind} {name} exists here and is not a replica; pick another "
                           "target name.")
    else:
        if replica.kind != kind or replica.pool != pool_name:
            raise Conflict(f"replica {name} is a {replica.kind} in pool {replica.pool}.")
        if replica.promoted_to:
            raise Conflict(f"replica {name} was promoted to {replica.promoted_to} (failover); "
                           "it takes no more snapshots from its old source.")
    return pool


def begin_transfer(*, kind, pool, name, snapshot, parent="", source="") -> Transfer:
    """Open a transfer into replica ``name``; earlier unfinished ones for it are dropped."""
    _check_target(kind, pool, name)
    return open_transfer(kind=kind, pool=pool, name=name, snapshot=snapshot, parent=parent,
                         source=source)


def open_transfer(*, kind, pool, name, snapshot, parent="", source="", **extra) -> Transfer:
    """A new spool for a stream into ``name`` (earlier unfinished ones for it are dropped)."""
    for meta in _incoming_dir().glob("*.json"):
        try:
            if json.loads(meta.read_text()).get("name") == name:
                Transfer(meta.stem).discard()
        except (ValueError, OSError, NotFound):
            continue
    transfer_id = secrets.token_hex(12)
    meta = {"kind": kind, "pool": pool, "name": name, "snapshot": snapshot,
            "parent": parent or "", "source": source, "begun": timezone.now().isoformat(),
            **extra}
    path = _incoming_dir() / f"{transfer_id}.json"
    path.write_text(json.dumps(meta))
    return Transfer(transfer_id)


def _verified_chunks(path: Path, size: int, sha256: str):
    """The spooled stream, checked against its length and SHA-256 before being used."""
    have = path.stat().st_size if path.exists() else 0
    if have != size:
        raise InvalidArgument(f"the transfer holds {have} bytes, the sender sent {size}: "
                              "resume the transfer")
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(READ_CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != sha256:
        raise InvalidArgument("the transfer's SHA-256 does not match the sender's: the stream "
                              "was damaged; it is discarded, send it again")

    def chunks():
        with open(path, "rb") as fh:
            while chunk := fh.read(READ_CHUNK):
                yield chunk
    return chunks()


def commit_transfer(transfer: Transfer, *, size: int, sha256: str) -> Snapshot:
    """Apply a whole, checked transfer as a new snapshot of its replica."""
    m = transfer.meta
    pool = _check_target(m["kind"], m["pool"], m["name"])
    try:
        stream = _verified_chunks(transfer.part_path, size, sha256)
    except InvalidArgument:
        if transfer.received >= size:
            transfer.discard()  # damaged, not short: resuming cannot fix it
        raise
    model = OBJECT_MODELS[m["kind"]]
    obj = model.objects.filter(name=m["name"]).first()
    if m["parent"] and (obj is None or not obj.snapshots.filter(name=m["parent"]).exists()):
        transfer.discard()
        raise Conflict(f"replica {m['name']} lacks snapshot {m['parent']}, the base of this "
                       "increment; the sender must send a full stream.")
    drv = driver_for(pool.driver)
    info = drv.receive_snapshot(pool.name, m["kind"], m["name"], stream, m["snapshot"])
    transfer.discard()
    with transaction.atomic():
        if obj is None:
            if m["kind"] == "filesystem":
                fi = drv.filesystem_info(pool.name, m["name"])
                obj = FileSystem.objects.create(name=m["name"], pool=pool, path=fi.path,
                                                used_bytes=fi.used_bytes)
            else:
                vi = drv.volume_info(pool.name, m["name"])
                obj = Volume.objects.create(name=m["name"], pool=pool, path=vi.path,
                                            size_bytes=vi.size_bytes, used_bytes=vi.used_bytes)
        snap = Snapshot.objects.create(name=m["snapshot"], path=info.path, **{m["kind"]: obj})
        replica, _ = Replica.objects.get_or_create(
            name=m["name"], defaults={"kind": m["kind"], "pool": pool.name})
        replica.last_snapshot, replica.last_received_at = snap.name, timezone.now()
        replica.source_hint = m.get("source", "")[:300]
        replica.save()
    _prune_received(obj)
    return snap


def _prune_received(obj) -> None:
    for old in list(obj.snapshots.order_by("-created_at", "-id"))[KEEP_RECEIVED:]:
        if not old.clones():
            storage.delete_snapshot(old)


def replica_info(replica: Replica) -> dict:
    """What a sender needs to pick an incremental base: the received snapshots."""
    obj = OBJECT_MODELS[replica.kind].objects.filter(name=replica.name).first()
    snaps = list(obj.snapshots.order_by("created_at", "id").values_list("name", flat=True)) \
        if obj else []
    promoted = OBJECT_MODELS[replica.kind].objects.filter(name=replica.promoted_to).first() \
        if replica.promoted_to else None
    return {"name": replica.name, "kind": replica.kind, "pool": replica.pool,
            "snapshots": snaps, "last_snapshot": replica.last_snapshot,
            "last_received_at": replica.last_received_at, "promoted_to": replica.promoted_to,
            "promoted_snapshots": list(promoted.snapshots.order_by("created_at", "id")
                                       .values_list("name", flat=True)) if promoted else [],
            "source": replica.source_hint}


def promote(replica: Replica, new_name: str):
    """Failover: a writable file system or volume ``new_name`` from the newest received
    snapshot; the replica then refuses further snapshots from its old source."""
    if replica.promoted_to:
        raise Conflict(f"replica {replica.name} was already promoted to {replica.promoted_to}.")
    obj = OBJECT_MODELS[replica.kind].objects.filter(name=replica.name).first()
    snap = obj.snapshots.filter(name=replica.last_snapshot).first() if obj else None
    if snap is None:
        raise Conflict(f"replica {replica.name} has received no snapshot yet; nothing to promote.")
    if OBJECT_MODELS[replica.kind].objects.filter(name=new_name).exists():
        raise Conflict(f"{replica.kind} {new_name} already exists; choose another name.")
    with transaction.atomic():
        made = storage.clone_snapshot(snap, name=new_name)
        replica.promoted_to = new_name
        replica.save(update_fields=["promoted_to"])
    return made


# -- failback -------------------------------------------------------------------------------

def _promoted(replica: Replica):
    if not replica.promoted_to:
        raise Conflict(f"replica {replica.name} has not been promoted (no failover happened "
                       "here); there is nothing to fail back.")
    obj = OBJECT_MODELS[replica.kind].objects.select_related("pool").filter(
        name=replica.promoted_to).first()
    if obj is None:
        raise Conflict(f"{replica.kind} {replica.promoted_to}, which replica {replica.name} "
                       "was promoted to, no longer exists; nothing to fail back.")
    return obj


def _replica_object(replica: Replica):
    return OBJECT_MODELS[replica.kind].objects.select_related("pool").filter(name=replica.name).first()


def failback_snapshot(replica: Replica, name: str) -> Snapshot:
    """Snapshot ``name`` of the promoted object (the existing one if it was taken already:
    a failback that is run again streams the same snapshot)."""
    obj = _promoted(replica)
    snap = obj.snapshots.filter(name=name).first()
    return snap or storage.create_snapshot(name=name, **{replica.kind: obj})


def failback_stream(replica: Replica, snapshot: str, parent: str, offset: int):
    """The promoted object's send stream of ``snapshot``, incremental on ``parent`` (one of
    its own snapshots, or the replica's received snapshot it started from), from byte
    ``offset``, then the trailer with the whole stream's SHA-256. Arguments are checked
    before the first byte, so a bad request is a 4xx, not a broken stream."""
    obj = _promoted(replica)
    if not obj.snapshots.filter(name=snapshot).exists():
        raise NotFound(f"{replica.kind} {obj.name} has no snapshot {snapshot!r}; take it "
                       "first (failback-snapshot).")
    base = _replica_object(replica)
    if obj.snapshots.filter(name=parent).exists():
        parent_source = None
    elif base is not None and base.snapshots.filter(name=parent).exists():
        parent_source = base.name
    else:
        raise Conflict(f"neither {obj.name} nor replica {replica.name} has snapshot "
                       f"{parent!r} any more; start the failback again (it picks the newest "
                       "snapshot both sides have).")
    drv = driver_for(obj.pool.driver)
    stream = drv.send_snapshot(obj.pool.name, replica.kind, obj.name, snapshot, parent,
                               parent_source=parent_source)
    return with_trailer(iobudget.throttle(stream, "replication"), offset)


def _snapshot_path(drv, pool: str, kind: str, source: str, name: str) -> str:
    for info in drv.list_snapshots(pool, kind, source):
        if info.name == name:
            return info.path
    raise NotFound(f"{kind} {source} has no snapshot {name!r}")


def rebase(replica: Replica, snapshot: str) -> dict:
    """End of a failback: a copy of the promoted object's ``snapshot`` (which the original
    side now has too) becomes the replica's newest snapshot, the original copy is deleted,
    and the replica accepts forward replication again. The promoted object stays, as an
    ordinary file system or volume; the answer's ``late_changes`` lists its paths changed
    after ``snapshot`` (written after the failback began: they are not on the original
    side). Running it again after it succeeded changes nothing (and lists nothing)."""
    target = _replica_object(replica)
    if target is None:
        raise Conflict(f"replica {replica.name} has no {replica.kind} here any more.")
    if not replica.promoted_to and target.snapshots.filter(name=snapshot).exists():
        return replica_info(replica)
    obj = _promoted(replica)
    original = obj.snapshots.filter(name=snapshot).first()
    if original is None:
        raise NotFound(f"{replica.kind} {obj.name} has no snapshot {snapshot!r} to re-base "
                       f"replica {replica.name} on.")
    drv = driver_for(target.pool.driver)
    pool = target.pool.name
    if not target.snapshots.filter(name=snapshot).exists():
        try:
            path = drv.copy_snapshot(pool, replica.kind, obj.name, snapshot, target.name,
                                     snapshot).path
        except AlreadyExists:  # copied before a crash, not recorded
            path = _snapshot_path(drv, pool, replica.kind, target.name, snapshot)
        Snapshot.objects.create(name=snapshot, path=path, **{replica.kind: target})
    late = _changed_since(obj, replica.kind, snapshot)
    with transaction.atomic():
        replica.promoted_to = ""
        replica.last_snapshot, replica.last_received_at = snapshot, timezone.now()
        replica.save(update_fields=["promoted_to", "last_snapshot", "last_received_at"])
    try:
        storage.delete_snapshot(original)  # the copy stands for it from now on
    except (Conflict, DataplaneError) as exc:
        log.warning("failback of replica %s: snapshot %s of %s stays: %s", replica.name,
                    snapshot, obj.name, exc)
    _prune_received(target)
    return {**replica_info(replica), "late_changes": late}


def _changed_since(obj, kind: str, snapshot: str) -> list | None:
    """Paths of ``obj`` changed since its ``snapshot``; None when its driver cannot tell."""
    try:
        return driver_for(obj.pool.driver).changed_since(obj.pool.name, kind, obj.name,
                                                         snapshot)
    except DataplaneError as exc:
        log.warning("cannot list what %s %s got after %s: %s", kind, obj.name, snapshot, exc)
        return None


def apply_to_source(transfer: Transfer, obj, *, size: int, sha256: str) -> Snapshot:
    """The original side of a failback: apply a whole, checked stream pulled from the peer
    as a new snapshot of ``obj`` itself (its parent is one of ``obj``'s snapshots). The
    snapshot appears whole or not at all; applying it again returns it."""
    m = transfer.meta
    kind = obj._meta.model_name
    done = obj.snapshots.filter(name=m["snapshot"]).first()
    if done is not None:
        transfer.discard()
        return done
    try:
        stream = _verified_chunks(transfer.part_path, size, sha256)
    except InvalidArgument:
        transfer.discard()  # the pieces do not make the stream: pull it again from byte 0
        raise
    if m["parent"] and not obj.snapshots.filter(name=m["parent"]).exists():
        transfer.discard()
        raise Conflict(f"{kind} {obj.name} no longer has snapshot {m['parent']}, the base of "
                       "the failback stream; run the failback again.")
    drv = driver_for(obj.pool.driver)
    try:
        path = drv.receive_snapshot(obj.pool.name, kind, obj.name, stream, m["snapshot"]).path
    except AlreadyExists:  # received before a crash, not recorded
        path = _snapshot_path(drv, obj.pool.name, kind, obj.name, m["snapshot"])
    snap = Snapshot.objects.create(name=m["snapshot"], path=path, **{kind: obj})
    transfer.discard()
    return snap
