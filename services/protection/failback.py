"""Failback: after a failover promoted the replica on the peer, bring the writes made there
back to this appliance's source and make it the writable original again (SnapMirror's
resync + reverse, driven from the original side with the pairing it already has).

``POST /api/v1/replications/<name>/failback/`` starts a Job on this (the original) side.
Each step is recorded in ``Replication.failback`` so that a run cut short (a dropped link, a
killed worker) is completed by running it again:

1. pull: the peer snapshots the promoted object as ``repl-<name>-<UTC time>`` and streams
   it, incremental on the newest snapshot both sides have: at first the source snapshot the
   replica received last (the promoted clone started from it; the stream names it by its
   received UUID, so it applies on this side's original). The stream is spooled here from
   the offset already held (a cut link resumes), checked against the SHA-256 in its
   trailer, then applied whole as a new snapshot of the source (``receive_snapshot``; the
   source itself is not touched by a partial stream).
2. rollback: the source's current state is kept in snapshot ``failback-<name>-<UTC time>``
   (what was written here after the common snapshot is not lost: clone that snapshot to get
   it back), then the source is rolled back in place to the pulled snapshot: same name,
   same path, writable, exports keep serving it.
3. rebase: the peer's replica takes a copy of the pulled snapshot as its newest, standing
   for it as the base of incremental streams, and accepts forward replication again; the
   promoted object there stays as an ordinary file system or volume. Writes made on it
   after step 1 are not brought back: stop its writers before failing back. The peer
   lists the paths changed there after the pulled snapshot, and the Job's result gives
   them (``late_changes``, the first 100, and ``late_change_count``), so that nothing
   written late is lost unnoticed.

The next forward run (sync) is incremental on the pulled snapshot.

Refused with 409 before the Job starts: no failover on the peer, no common snapshot, a run
of this replication under way. An unreachable peer is 503. ``{"abandon": true}`` forgets a
failback that cannot complete (the peer's promoted copy was deleted, ...) so that syncs are
allowed again; what it already did stays.
"""
import logging

from django.utils import timezone

from plumbing.errors import Conflict, Unavailable
from plane.jobs import job_task, start_job
from dataplane.errors import NotFound
from services.protection import receiver
from services.protection.locks import recorded_run, run_lock
from services.protection.models import Replication
from services.protection.peerclient import TRAILER_LEN, TRAILER_MAGIC, PeerError
from plumbing.progress import Meter
from services.protection.replication import (
    ReplicationFailed,
    _remote_names,
    client_for,
    unique_snapshot_name,
)
from services.storage import service as storage
from services.storage.drivers import driver_for

log = logging.getLogger(__name__)
SPOOL_BATCH = 4 << 20  # bytes gathered before each fsynced append to the spool


class PeerUnavailable(Unavailable):
    """The peer did not answer (or refused our token): nothing was changed."""

    code = "peer_unreachable"


def plan(rep: Replication, remote=None) -> dict:
    """``{"parent", "remote"}``: the newest snapshot both sides have, which the failback
    stream is based on; Conflict with the reason when there is no failover to undo or no
    common snapshot."""
    if remote is None:
        remote = client_for(rep.peer).replica(rep.target_name)
    where = f"on peer {rep.peer.name}"
    if remote is None:
        raise Conflict(f"there is no replica {rep.target_name} {where}: nothing to fail back.")
    if not remote.get("promoted_to"):
        raise Conflict(f"replica {rep.target_name} {where} was not promoted (no failover "
                       "happened): there is nothing to fail back; sync sends this side's "
                       "changes.")
    ours = set(rep.source_snapshots().values_list("name", flat=True))
    for names in (remote.get("promoted_snapshots") or [], remote["snapshots"]):
        common = [n for n in names if n in ours]
        if common:
            return {"parent": common[-1], "remote": remote}
    raise Conflict(
        f"{rep.kind} {rep.source.name} shares no snapshot with replica {rep.target_name} "
        f"{where} (here: {', '.join(sorted(ours)) or 'none'}; there: "
        f"{', '.join(remote['snapshots']) or 'none'}), so it cannot be resynced "
        f"incrementally. Replicate {remote['promoted_to']} from the peer to this appliance "
        "instead (a full copy).")


def check_can_start(rep: Replication) -> None:
    """The 409s (and 503) a failback request gets before a Job is queued."""
    with run_lock(f"replication:{rep.name}"):
        pass  # Conflict if a sync or failback of this replication is running
    if rep.failback:
        return  # one under way: running it again completes it
    try:
        plan(rep)
    except PeerError as exc:
        raise PeerUnavailable(f"peer {rep.peer.name} did not answer: {exc}") from exc


def abandon(rep: Replication) -> Replication:
    """Forget a failback under way (e.g. the peer's promoted copy is gone): its spool is
    dropped and syncs are allowed again. What it did stays: a pulled snapshot, a rollback
    already made (the snapshot ``preserved`` holds the state before it)."""
    with run_lock(f"replication:{rep.name}"):
        if not rep.failback:
            raise Conflict(f"no failback of {rep.name} is under way.")
        if rep.failback.get("transfer"):
            try:
                receiver.Transfer(rep.failback["transfer"]).discard()
            except NotFound:
                pass
        Replication.objects.filter(pk=rep.pk).update(
            failback={}, state="error",
            error=f"failback abandoned at step {rep.failback.get('phase')}"
                  + (f"; the state before the rollback is in snapshot "
                     f"{rep.failback['preserved']}" if rep.failback.get("preserved") else ""))
    rep.refresh_from_db()
    return rep


def run_failback(rep: Replication, progress=lambda pct, msg, **counts: None) -> dict:
    """A failback (see the module doc), one step after the other from where the last run
    stopped; errors are recorded on the row and the next run continues."""
    return recorded_run(f"replication:{rep.name}", rep, _run, progress, "failback: ")


def _save(rep: Replication, **state) -> dict:
    rep.failback = {**rep.failback, **state}
    Replication.objects.filter(pk=rep.pk).update(failback=rep.failback)
    return rep.failback


def _run(rep: Replication, progress) -> dict:
    client = client_for(rep.peer)
    source = rep.source
    resumed_at, size = 0, 0
    if not rep.failback:
        progress(1, f"asking peer {rep.peer.name} for replica {rep.target_name}")
        found = plan(rep)
        # never a name the peer has: it would stream its old snapshot of that name
        name = unique_snapshot_name(
            source, f"{rep.snapshot_prefix}{timezone.now().strftime('%Y%m%d-%H%M%S')}",
            taken=_remote_names(found["remote"]))
        _save(rep, phase="pull", snapshot=name, parent=found["parent"], transfer="",
              preserved="", peer_copy=found["remote"]["promoted_to"])
    state = rep.failback
    if state["phase"] == "pull":
        size, resumed_at = _pull(rep, client, progress)
        state = _save(rep, phase="rollback")
    if state["phase"] == "rollback":
        _rollback(rep, progress)
        state = _save(rep, phase="rebase")
    progress(92, f"peer {rep.peer.name} re-bases replica {rep.target_name} on "
                 f"{state['snapshot']}")
    late = client.rebase(rep.target_name, state["snapshot"]).get("late_changes") or []
    snap = source.snapshots.get(name=state["snapshot"])
    Replication.objects.filter(pk=rep.pk).update(
        failback={}, state="ok", error="", last_snapshot=snap.name,
        last_snapshot_at=snap.created_at, last_run_at=timezone.now(), pending_snapshot="",
        pending_parent="", pending_transfer="")
    rep.refresh_from_db()
    peer_copy = (f"{rep.kind} {state.get('peer_copy')} stays on peer {rep.peer.name} as an "
                 f"ordinary {rep.kind}; what was written there after {snap.name} is not here")
    if late:
        peer_copy += (f": {len(late)} path(s) changed there since then, e.g. "
                      + ", ".join(late[:5]))
        log.warning("failback of %s: %s", rep.name, peer_copy)
    return {"snapshot": snap.name, "parent": state["parent"], "bytes": size,
            "resumed_at": resumed_at, "preserved": state["preserved"],
            "source": f"{rep.kind} {source.name}", "path": source.path,
            "peer_copy": peer_copy, "late_changes": late[:100], "late_change_count": len(late)}


def _pull(rep: Replication, client, progress) -> tuple:
    """Spool the peer's stream (resuming), check it, apply it as a snapshot of the source."""
    state, source = rep.failback, rep.source
    name, parent = state["snapshot"], state["parent"]
    if source.snapshots.filter(name=name).exists():
        return 0, 0  # applied before the run was cut short
    progress(3, f"peer {rep.peer.name} snapshots {rep.target_name}'s promoted copy as {name}")
    client.failback_snapshot(rep.target_name, name)
    transfer = None
    if state.get("transfer"):
        try:
            transfer = receiver.Transfer(state["transfer"])
        except NotFound:
            transfer = None
    if transfer is None:
        transfer = receiver.open_transfer(
            kind=rep.kind, pool=source.pool.name, name=source.name, snapshot=name,
            parent=parent, source=f"failback from peer {rep.peer.name}", failback=rep.name)
        _save(rep, transfer=transfer.id)
    offset = transfer.received
    progress(5, f"pulling {name} (incremental on {parent})"
             + (f", resuming at byte {offset}" if offset else ""))
    meter = Meter("pulled", max(1, source.used_bytes // 10))
    tail, buf, done = b"", bytearray(), offset
    try:
        for chunk in client.failback_stream(rep.target_name, name, parent, offset):
            data = tail + chunk  # the last TRAILER_LEN bytes may be the trailer: hold back
            tail = data[-TRAILER_LEN:]
            buf += data[:-TRAILER_LEN]
            if len(buf) >= SPOOL_BATCH:
                done = transfer.append(done, bytes(buf))
                buf.clear()
                progress(meter.pct(done, 5, 70), meter.text(done), **meter.counts(done))
    finally:
        if buf:  # stream bytes in order even when the link broke: the next run resumes after
            done = transfer.append(done, bytes(buf))
    if len(tail) != TRAILER_LEN or not tail.startswith(TRAILER_MAGIC):
        if offset and done == offset:
            # nothing came past what we hold: the peer's stream may be shorter than our
            # spool (it is not the same stream any more); start it over
            transfer.discard()
            _save(rep, transfer="")
            raise ReplicationFailed(f"the peer's stream of {name} gave nothing past byte "
                                    f"{offset}; the next run pulls it again from byte 0")
        raise ReplicationFailed(f"the peer's stream of {name} ended without its checksum "
                                f"after {done} bytes; run the failback again to resume")
    sha = tail[len(TRAILER_MAGIC):].decode()
    progress(72, f"applying {done} bytes as snapshot {name} of {source.name}",
             done=done, total=done)
    try:
        receiver.apply_to_source(transfer, source, size=done, sha256=sha)
    except Exception:
        if not transfer.meta_path.exists():
            _save(rep, transfer="")  # discarded (damaged): the next run pulls from byte 0
        raise
    return done, offset


def _rollback(rep: Replication, progress) -> None:
    """Keep the source's current state in a snapshot, then roll it back to the pulled one."""
    state, source = rep.failback, rep.source
    if not state.get("preserved"):
        keep = unique_snapshot_name(
            source, f"failback-{rep.name}-{timezone.now().strftime('%Y%m%d-%H%M%S')}")
        progress(75, f"keeping {source.name}'s current state in snapshot {keep}")
        storage.create_snapshot(name=keep, **{rep.kind: source})
        _save(rep, preserved=keep)
    progress(80, f"rolling {source.name} back to {state['snapshot']} (in place)")
    drv = driver_for(source.pool.driver)
    info = drv.rollback(source.pool.name, rep.kind, source.name, state["snapshot"])
    fields = {"used_bytes": info.used_bytes}
    if rep.kind == "volume":
        fields["size_bytes"] = info.size_bytes
    type(source).objects.filter(pk=source.pk).update(**fields)


@job_task("protection.failback_job")
def failback_job(ctx, replication: int):
    """Bring the peer's writes back after a failover and make this side the original."""
    return run_failback(Replication.objects.get(pk=replication), ctx.progress)


def start_failback(rep: Replication, user=None):
    """Queue a failback Job (``check_can_start`` first for the 409s)."""
    return start_job("failback", failback_job, user=user, target=("replication", rep.name),
                     params={"replication": rep.pk})
