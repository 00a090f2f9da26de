"""The receiving side of replication: transfers spooled to disk chunk by chunk, applied
with the dataplane's ``receive_snapshot`` only when whole and checked, and the replicas
they build (failover makes a writable clone of the newest received snapshot)."""
import hashlib
import json
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.errors import Conflict
from dataplane.errors import InvalidArgument, NotFound
from services.protection.models import Replica
from services.storage import service as storage
from services.storage.drivers import driver_for
from services.storage.models import FileSystem, Pool, Snapshot, Volume

READ_CHUNK = 1 << 20
KEEP_RECEIVED = 3  # received snapshots kept per replica (older ones go unless cloned)
MODELS = {"filesystem": FileSystem, "volume": Volume}


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
    if kind not in MODELS:
        raise InvalidArgument(f"kind {kind!r}: use 'filesystem' or 'volume'")
    pool = Pool.objects.filter(name=pool_name).first()
    if pool is None:
        raise NotFound(f"no pool {pool_name!r} on this appliance to receive into")
    replica = Replica.objects.filter(name=name).first()
    if replica is None:
        if MODELS[kind].objects.filter(name=name).exists():
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
    for meta in _incoming_dir().glob("*.json"):
        try:
            if json.loads(meta.read_text()).get("name") == name:
                Transfer(meta.stem).discard()
        except (ValueError, OSError, NotFound):
            continue
    transfer_id = secrets.token_hex(12)
    meta = {"kind": kind, "pool": pool, "name": name, "snapshot": snapshot,
            "parent": parent or "", "source": source, "begun": timezone.now().isoformat()}
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
    model = MODELS[m["kind"]]
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
    obj = MODELS[replica.kind].objects.filter(name=replica.name).first()
    snaps = list(obj.snapshots.order_by("created_at", "id").values_list("name", flat=True)) \
        if obj else []
    return {"name": replica.name, "kind": replica.kind, "pool": replica.pool,
            "snapshots": snaps, "last_snapshot": replica.last_snapshot,
            "last_received_at": replica.last_received_at, "promoted_to": replica.promoted_to,
            "source": replica.source_hint}


def promote(replica: Replica, new_name: str):
    """Failover: a writable file system or volume ``new_name`` from the newest received
    snapshot; the replica then refuses further snapshots from its old source."""
    if replica.promoted_to:
        raise Conflict(f"replica {replica.name} was already promoted to {replica.promoted_to}.")
    obj = MODELS[replica.kind].objects.filter(name=replica.name).first()
    snap = obj.snapshots.filter(name=replica.last_snapshot).first() if obj else None
    if snap is None:
        raise Conflict(f"replica {replica.name} has received no snapshot yet; nothing to promote.")
    if MODELS[replica.kind].objects.filter(name=new_name).exists():
        raise Conflict(f"{replica.kind} {new_name} already exists; choose another name.")
    with transaction.atomic():
        made = storage.clone_snapshot(snap, name=new_name)
        replica.promoted_to = new_name
        replica.save(update_fields=["promoted_to"])
    return made
