"""Replication to a peer appliance: peers (URL + token, checked by calling the peer), and
runs that send an incremental snapshot stream in chunks the peer spools and applies whole.

A run: take ``repl-<name>-<UTC time>`` on the source; pick as base the newest of our
snapshots the replica already has (none: a full stream); stream ``send_snapshot`` to the
peer from the offset it already holds (a run cut short is resumed by the next, which sends
the same snapshot again and skips what arrived); commit with length and SHA-256; then the
new snapshot is the base and older replication snapshots on the source are deleted.

After a failover on the peer, runs are refused until a failback (``failback.py``) has
brought the peer's writes back and re-based the replica; the next run is then incremental
on the snapshot the failback pulled.
"""
import hashlib
import logging

from django.db import transaction
from django.utils import timezone

from plumbing.errors import Conflict
from services.protection import beat
from services.protection.locks import recorded_run
from services.protection.models import Replication, ReplicationPeer
from services.protection.peerclient import PeerClient, PeerError
from plumbing.progress import Meter
from services.storage import service as storage
from services.storage.drivers import driver_for
from plane import iobudget

log = logging.getLogger(__name__)
TASK = "protection.run_replication"


class ReplicationFailed(Exception):
    """A run did not complete; the message says why and what the next run will do."""


# -- peers ---------------------------------------------------------------------------------

def client_for(peer: ReplicationPeer) -> PeerClient:
    return PeerClient(peer.url, peer.token)


def check_peer(peer: ReplicationPeer) -> ReplicationPeer:
    """Call the peer with the token; record whether it answered and as whom."""
    try:
        me = client_for(peer).whoami()
    except PeerError as exc:
        peer.state, peer.error = "unreachable", str(exc)
    else:
        if me.get("role") not in ("admin", "operator"):
            peer.state = "unauthorized"
            peer.error = (f"the token is user {me.get('username')!r} with role "
                          f"{me.get('role')!r} on the peer; it needs operator or admin")
        else:
            peer.state, peer.error = "online", ""
        peer.remote_user = str(me.get("username", ""))[:150]
    peer.last_checked_at = timezone.now()
    if peer.pk:
        peer.save()
    return peer


# -- replications --------------------------------------------------------------------------

_scheduled = beat.Scheduled(Replication, "replication", TASK)
create_replication = _scheduled.create
update_replication = _scheduled.update


def delete_replication(rep: Replication) -> None:
    """Stop replicating; the source's replication snapshots go, the replica stays."""
    with transaction.atomic():
        beat.delete_periodic_task(rep)
        for snap in rep.source_snapshots().filter(name__startswith=rep.snapshot_prefix):
            if not snap.clones():
                storage.delete_snapshot(snap)
        rep.delete()


def _choose_base(rep: Replication, remote) -> str:
    if remote is None or not remote["snapshots"]:
        return ""
    if remote.get("promoted_to"):
        raise ReplicationFailed(
            f"the replica {rep.target_name} was promoted to {remote['promoted_to']} on the "
            "peer (failover); replicating into it again would lose the writes made there. "
            "Fail back first (POST .../failback/): it brings them here and re-bases the "
            "replica.")
    ours = set(rep.source_snapshots().values_list("name", flat=True))
    common = [name for name in remote["snapshots"] if name in ours]
    if not common:
        raise ReplicationFailed(
            f"the replica {rep.target_name} on the peer shares no snapshot with "
            f"{rep.source.name}; delete the replica there to start again with a full copy.")
    return common[-1]


def _remote_names(remote: dict | None) -> set:
    """Every snapshot name the peer's replica (and the copy it was promoted to) holds."""
    if remote is None:
        return set()
    return set(remote["snapshots"]) | set(remote.get("promoted_snapshots") or [])


def unique_snapshot_name(source, base: str, taken=()) -> str:
    """``base`` (cut to 63 characters), or ``base-2``, ``base-3``... if a snapshot of the
    source has it, or it is in ``taken`` (names still recorded elsewhere, e.g. restore points
    of snapshots already deleted)."""
    base = base[:63]
    name, n = base, 1
    while name in taken or source.snapshots.filter(name=name).exists():
        n += 1  # two runs in one second
        name = f"{base[:60]}-{n}"
    return name


def _upload(client: PeerClient, transfer: dict, stream, progress, estimate: int):
    """Send ``stream`` from the offset the peer has; return (length, sha256)."""
    offset, step = transfer["received"], transfer["chunk_bytes"]
    meter = Meter("sent", estimate)
    digest, pos, buf = hashlib.sha256(), 0, bytearray()
    for chunk in stream:
        digest.update(chunk)
        start = pos
        pos += len(chunk)
        if pos <= offset:
            continue  # the peer has these bytes already (resume)
        buf += chunk[max(0, offset - start):]
        while len(buf) >= step:
            client.put(transfer["id"], pos - len(buf), bytes(buf[:step]))
            del buf[:step]
            sent = pos - len(buf)
            progress(meter.pct(pos, 5, 95), meter.text(sent), **meter.counts(sent))
    if buf:
        client.put(transfer["id"], pos - len(buf), bytes(buf))
        progress(meter.pct(pos, 5, 95), meter.text(pos), **meter.counts(pos))
    if pos < offset:
        raise ReplicationFailed(f"the peer holds {offset} bytes but the stream has {pos}; "
                                "the transfer is restarted on the next run")
    return pos, digest.hexdigest()


def run_replication(rep: Replication, progress=lambda pct, msg, **counts: None) -> dict:
    """One replication run (see the module doc); errors are recorded on the row."""
    return recorded_run(f"replication:{rep.name}", rep, _run, progress)


def require_no_failback(rep: Replication) -> None:
    """Forward runs wait until a failback under way is complete."""
    if rep.failback:
        raise Conflict(f"a failback of {rep.name} is under way (step "
                       f"{rep.failback.get('phase')}); run the failback again to complete it "
                       "before syncing.")


def _run(rep: Replication, progress) -> dict:
    require_no_failback(rep)
    client = client_for(rep.peer)
    source = rep.source
    drv = driver_for(source.pool.driver)
    progress(1, f"asking peer {rep.peer.name} for replica {rep.target_name}")
    remote = client.replica(rep.target_name)
    if remote is not None and remote.get("promoted_to"):
        _choose_base(rep, remote)  # raises with the reason
    transfer = None
    pending = rep.pending_snapshot and rep.source_snapshots().filter(
        name=rep.pending_snapshot).exists()
    if pending and remote is not None and rep.pending_snapshot in remote["snapshots"]:
        # the peer applied it but we died before recording that: just record it
        return _finish(rep, rep.pending_snapshot, rep.pending_parent, 0, "", 0)
    if pending:
        snap_name, parent = rep.pending_snapshot, rep.pending_parent
        if rep.pending_transfer:
            transfer = client.transfer(rep.pending_transfer)
        if parent and (remote is None or parent not in remote["snapshots"]):
            pending = False  # its base vanished on the peer: start over below
    if not pending:
        parent = _choose_base(rep, remote)
        now = timezone.now()
        # a name the replica does not hold: this side deletes its older replication
        # snapshots, so a new one could otherwise get the name of one the replica still
        # holds (runs within one second), and be taken for already sent
        snap_name = unique_snapshot_name(
            source, f"{rep.snapshot_prefix}{now.strftime('%Y%m%d-%H%M%S')}",
            taken=_remote_names(remote))
        storage.create_snapshot(name=snap_name, **{rep.kind: source})
        transfer = None
    if transfer is None:
        transfer = client.begin(kind=rep.kind, pool=rep.target_pool, name=rep.target_name,
                                snapshot=snap_name, parent=parent,
                                source=f"{rep.kind} {source.name}")
    Replication.objects.filter(pk=rep.pk).update(
        pending_snapshot=snap_name, pending_parent=parent, pending_transfer=transfer["id"])
    progress(5, f"sending {snap_name}" + (f" (incremental on {parent})" if parent else " (full)")
             + (f", resuming at byte {transfer['received']}" if transfer["received"] else ""))
    stream = iobudget.throttle(drv.send_snapshot(source.pool.name, rep.kind, source.name,
                                               snap_name, parent or None), "replication")
    estimate = source.used_bytes if not parent else max(1, source.used_bytes // 10)
    try:
        size, sha = _upload(client, transfer, stream, progress, estimate)
    finally:
        stream.close()  # stops `btrfs send` now, not when the generator is collected
    progress(96, f"peer applies {size} bytes")
    client.commit(transfer["id"], size=size, sha256=sha)
    return _finish(rep, snap_name, parent, size, sha, transfer["received"])


def _finish(rep, snap_name, parent, size, sha, resumed_at) -> dict:
    snap_row = rep.source_snapshots().get(name=snap_name)
    Replication.objects.filter(pk=rep.pk).update(
        state="ok", error="", last_snapshot=snap_name, last_snapshot_at=snap_row.created_at,
        last_run_at=timezone.now(), last_bytes=size, pending_snapshot="", pending_parent="",
        pending_transfer="")
    rep.refresh_from_db()
    for old in rep.source_snapshots().filter(name__startswith=rep.snapshot_prefix).exclude(
            name=snap_name):
        if not old.clones():
            try:
                storage.delete_snapshot(old)
            except Exception as exc:  # the replica is updated; a leftover is retried next run
                log.warning("replication %s: could not delete old snapshot %s: %s",
                            rep.name, old.name, exc)
    return {"snapshot": snap_name, "parent": parent, "bytes": size, "sha256": sha,
            "resumed_at": resumed_at, "lag_seconds": rep.lag_seconds()}


def require_idle_peer(peer: ReplicationPeer) -> None:
    """A peer used by replications cannot be deleted."""
    names = list(peer.replications.values_list("name", flat=True))
    if names:
        raise Conflict(f"peer {peer.name} is used by replication(s) {', '.join(names)}; "
                       "delete them first.")
