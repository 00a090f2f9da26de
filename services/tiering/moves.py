"""Move a file system or volume to another pool (flash -> capacity, or back), keeping its
name, with the copy drawn from the shared I/O budget (job class ``migration``).

How: a full send of a first snapshot into a staging object in the target pool, then
incremental rounds until the source's live content equals the newest snapshot (nothing was
written since it); a writable clone of that snapshot in the target pool takes the name; its
tree digest must equal the source snapshot's; only then does the row point at the new pool
and the hot copy go. The source stays as it was when anything fails before that point.
A run killed mid-way (``kill -9`` of its worker) leaves its snapshots and half-received
staging copy behind, named by the record's ``tag``: the next start of a worker records the
move failed and removes them (``fail_interrupted``), and so does the next move of the
object, before it starts. A run killed after the switch (the row already points at the new,
verified copy) is completed instead, by a task the next worker queues: the old copy is
released if it still holds the content verified before the switch (recorded on the move),
else kept and named in the record, as below.

Limits (refused with 409, not ignored): the object must have no snapshots and no clones
(their history would be lost); a service refuses through ``signals.check_move`` when its
clients cannot follow the object (block, file) or when it uses it (protection: a replication
or backup of it). Writers must pause for the switch: if the content keeps changing for
``MAX_ROUNDS`` rounds the move fails.

What serves the object follows it: after the switch the move sends
``services.tiering.signals.moved``; the file service re-points the NFS exports and SMB
shares of a moved file system (same pseudo path and share name) and releases the old path;
the block service re-points the iSCSI LUNs and NBD/vhost-user-blk exports of a moved volume
(same target IQN and LUN, NBD name, socket) and refuses when a client wrote to the old copy
after the last round. If a receiver refuses, the row is put back, the receivers are told
again, the new copy is dropped and the move fails with the old copy still in use. Should the
old copy have changed after the last round (a writer during the switch), it is kept (not
released) and the move records why, so those writes can be recovered from it by hand.
"""
import logging
import secrets

from django.db import transaction
from django.utils import timezone

from plumbing.errors import Conflict
from plane.models import Job
from dataplane.errors import DataplaneError, NotFound
from plumbing.progress import Meter
from plumbing.treedigest import tree_digest
from services.storage.drivers import delete_if_present, driver_for
from services.storage.models import OBJECT_MODELS, Pool
from plane import iobudget
from services.tiering.models import TierMove
from services.tiering.signals import check_move, moved

log = logging.getLogger(__name__)
MAX_ROUNDS = 4


class MoveFailed(Exception):
    """The move did not complete; the source is unchanged and still in use."""


def check_movable(obj, pool: Pool) -> None:
    """Raise Conflict with the reason when ``obj`` cannot move to ``pool``."""
    kind = obj._meta.model_name
    if obj.pool_id == pool.pk:
        raise Conflict(f"{obj.name} is already in pool {pool.name}.")
    if pool.driver != obj.pool.driver:
        raise Conflict(f"pool {pool.name} uses the {pool.driver} driver and {obj.pool.name} "
                       f"the {obj.pool.driver} driver; moves stay within one driver.")
    snaps = list(obj.snapshots.values_list("name", flat=True))
    if snaps:
        raise Conflict(f"{obj.name} has snapshots ({', '.join(snaps[:5])}); moving would "
                       "lose them. Delete them first (moves with history are not done yet).")
    if obj.origin_id:
        raise Conflict(f"{obj.name} is a clone of {obj.origin}; clones cannot move yet.")
    _settle_finished(kind, obj.name)
    if TierMove.objects.filter(kind=kind, name=obj.name, state__in=["pending", "running"]):
        raise Conflict(f"{obj.name} is already being moved.")
    # a service that serves or uses the object may refuse (409): protection refuses one a
    # replication or backup uses, block and file one whose clients could not follow it
    check_move.send(sender=type(obj), instance=obj, pool=pool)


def _copy(drv, src_pool, dst_pool, kind, name, staging, snap, parent,
          on_bytes=lambda moved: None) -> int:
    moved = 0
    stream = drv.send_snapshot(src_pool, kind, name, snap, parent)

    def counted():
        nonlocal moved
        for chunk in iobudget.throttle(stream, "migration"):
            moved += len(chunk)
            on_bytes(moved)  # progress, and where a cancel is noticed
            yield chunk
    try:
        drv.receive_snapshot(dst_pool, kind, staging, counted(), snap)
    finally:
        stream.close()
    return moved


def move(record: TierMove, progress=lambda pct, msg, **counts: None) -> dict:
    """Run a tier move (see the module doc) and record the outcome on ``record``."""
    model = OBJECT_MODELS[record.kind]
    obj = model.objects.select_related("pool").get(name=record.name)
    dst = Pool.objects.get(name=record.to_pool)
    TierMove.objects.filter(pk=record.pk).update(state="running")
    try:
        # asked again: a service may have started serving it since the move was queued
        check_move.send(sender=model, instance=obj, pool=dst)
        for dead in TierMove.objects.filter(kind=record.kind, name=record.name).exclude(
                tag="").exclude(pk=record.pk):
            clear_leftovers(dead)  # of a run cut off by a kill (normally done at worker start)
        result = _move(record, obj, dst, progress)
    except Exception as exc:
        TierMove.objects.filter(pk=record.pk).update(state="failed", error=str(exc),
                                                     finished_at=timezone.now())
        record.refresh_from_db()
        clear_leftovers(record)  # the run removes what it made; this catches what it missed
        raise
    TierMove.objects.filter(pk=record.pk).update(
        state="done", finished_at=timezone.now(), bytes_moved=result["bytes"],
        rounds=result["rounds"], tree_sha256=result["tree_sha256"],
        error=result.get("warning", ""), tag="")
    return result


def _settle_finished(kind: str, name: str) -> None:
    """A move whose Job finished without running it (cancelled while queued) or was failed
    by the reaper still says pending/running: record what its Job says."""
    for record in TierMove.objects.filter(
            kind=kind, name=name, state__in=["pending", "running"],
            job__state__in=["succeeded", "failed", "cancelled"]).select_related("job"):
        TierMove.objects.filter(pk=record.pk).update(
            state="failed", finished_at=record.job.finished_at or timezone.now(),
            error=record.job.error or f"its job was {record.job.state}")


def fail_interrupted(finish=None) -> int:
    """When a worker starts: a move still running was cut off with the previous worker
    (one worker per appliance, as plane.jobs assumes). Before the switch: record it
    failed (the object is still in its old pool); after it: hand its id to ``finish``
    (the worker queues :func:`complete_switched`, which reads both copies: not at start-up;
    by default it is called here). Then remove what the runs left behind. Returns how many
    moves failed."""
    n = 0
    for record in TierMove.objects.filter(state="running"):
        model = OBJECT_MODELS[record.kind]
        if record.from_pool != record.to_pool and model.objects.filter(
                name=record.name, pool__name=record.to_pool).exists():
            (finish or complete_switched)(record.pk)
            continue
        n += TierMove.objects.filter(pk=record.pk, state="running").update(
            state="failed", finished_at=timezone.now(),
            error="interrupted: the worker stopped during the move; the source is unchanged "
                  "in its pool, move it again")
    for record in TierMove.objects.exclude(tag="").exclude(state__in=["pending", "running"]):
        clear_leftovers(record)
    if n:
        log.warning("marked %d interrupted tier move(s) as failed", n)
    return n


def complete_switched(move_id: int) -> None:
    """A move cut off after its switch: the row points at the new, verified copy. Tell the
    services again (the kill may have come while they followed it), then release the old
    copy if it still holds what was copied and verified; it is kept, and the record says
    where, if a writer changed it during the switch or a service could not follow. The move (and
    its Job) is recorded done. Running it again after it completed changes nothing."""
    record = TierMove.objects.filter(pk=move_id, state="running").first()
    if record is None:
        return
    model = OBJECT_MODELS[record.kind]
    obj = model.objects.select_related("pool").get(name=record.name)
    # the verified content, recorded before the switch (clients may write the new copy now)
    digest = record.tree_sha256 or tree_digest(obj.path)
    note = ("completed when the next worker started (the previous one stopped after the "
            "switch)")
    src = Pool.objects.filter(name=record.from_pool).first()
    if src is not None:
        drv = driver_for(src.driver)
        info_of = drv.filesystem_info if record.kind == "filesystem" else drv.volume_info
        try:
            old = info_of(record.from_pool, record.name)
        except NotFound:
            old = None  # released before the kill
        refused = None
        if old is not None:
            try:
                moved.send(sender=model, instance=obj, old_path=old.path,
                           old_pool=record.from_pool)
            except Exception as exc:  # noqa: BLE001 - recorded, and the old copy kept
                refused = exc
        if refused is not None:
            note += (f"; what serves {record.name} could not be moved to the new copy "
                     f"({refused}), so the copy at {old.path} is kept")
            log.warning("tier move of %s: %s", record.name, note)
        elif old is not None and tree_digest(old.path) == digest:
            delete_if_present(drv, record.from_pool, record.kind, record.name)
            note += f"; the copy in {record.from_pool} was released"
        elif old is not None:
            note += (f"; the copy in {record.from_pool} differs from the moved one (written "
                     f"during the switch) and is kept at {old.path} so those writes can be "
                     "recovered")
            log.warning("tier move of %s: %s", record.name, note)
    TierMove.objects.filter(pk=record.pk).update(
        state="done", finished_at=timezone.now(), tree_sha256=digest, error=note)
    record.refresh_from_db()
    clear_leftovers(record)  # the staging copy and the move's snapshots
    if record.job_id:
        Job.objects.filter(pk=record.job_id).update(
            state=Job.State.SUCCEEDED, progress=100.0, error="", message=note[:500],
            finished_at=timezone.now())


def clear_leftovers(record: TierMove) -> bool:
    """Remove what a run of ``record`` made and did not remove (it was killed): its staging
    copy in the target pool and its snapshots of the object in the source pool. True, with
    the record's tag cleared, once nothing of it is left; False (logged) if something
    could not be removed yet (the next worker start or move of the object tries again)."""
    if not record.tag:
        return True
    prefix = f"tier-{record.tag}-"
    try:
        target = Pool.objects.filter(name=record.to_pool).first()
        if target is not None:  # a deleted pool took the staging copy with it
            drv = driver_for(target.driver)
            delete_if_present(drv, record.to_pool, record.kind, f"{prefix}{record.name}"[:63])
            try:
                snaps = drv.list_snapshots(record.from_pool, record.kind, record.name)
            except NotFound:
                snaps = []
            for snap in snaps:
                if snap.name.startswith(prefix):
                    drv.delete_snapshot(record.from_pool, record.kind, record.name, snap.name)
    except DataplaneError as exc:
        log.warning("tier move %s: could not remove what its run left behind: %s",
                    record, exc)
        return False
    TierMove.objects.filter(pk=record.pk).update(tag="")
    return True


def _move(record, obj, dst: Pool, progress) -> dict:
    kind, name, src_pool = record.kind, obj.name, obj.pool.name
    drv = driver_for(obj.pool.driver)
    tag = secrets.token_hex(3)
    staging = f"tier-{tag}-{name}"[:63]
    # recorded before anything is made: a run killed mid-way is cleaned up by its tag
    TierMove.objects.filter(pk=record.pk).update(tag=tag)
    snaps, moved_bytes, parent = [], 0, None
    meter = None

    def report(done, rnd):
        progress(meter.pct(done, 5, 80), f"copied {done} of ~{max(meter.total, done)} bytes "
                 f"(round {rnd}), {meter.speed(done)}", **meter.counts(done))
    try:
        for rnd in range(1, MAX_ROUNDS + 1):
            snap = f"tier-{tag}-{rnd}"
            info = drv.create_snapshot(src_pool, kind, name, snap)
            snaps.append(snap)
            if meter is None:  # the full round carries about the used bytes (counted now
                # that the snapshot committed what was written)
                meter = Meter("copied", (drv.filesystem_info if kind == "filesystem"
                                         else drv.volume_info)(src_pool, name).used_bytes)
            progress(meter.pct(moved_bytes, 5, 80),
                     f"round {rnd}: copying {name}@{snap} to {dst.name}"
                     + (" (incremental)" if parent else ""), **meter.counts(moved_bytes))
            moved_bytes += _copy(drv, src_pool, dst.name, kind, name, staging, snap, parent,
                                 lambda n, base=moved_bytes, rnd=rnd: report(base + n, rnd))
            parent = snap
            digest = tree_digest(info.path)
            if tree_digest(obj.path) == digest:
                break  # nothing was written since the snapshot: this one is final
        else:
            raise MoveFailed(f"{name} kept changing during {MAX_ROUNDS} copy rounds; pause "
                             "its writers (and exports) and move it again.")
        rounds = len(snaps)
        progress(85, "verifying the copy")
        new = drv.clone_snapshot(dst.name, kind, staging, snap, name)
        got = tree_digest(new.path)
        if got != digest:
            delete_if_present(drv, dst.name, kind, name)
            raise MoveFailed(f"the copy of {name} in {dst.name} does not match the source "
                             f"({got[:12]} != {digest[:12]}); the source is kept")
        progress(90, f"switching {name} (and what serves it) to {dst.name}")
        # what the old copy must still hold to be released, should this run be cut off
        TierMove.objects.filter(pk=record.pk).update(tree_sha256=digest)
        old_path = obj.path
        _switch(obj, dst, new.path, old_path, src_pool)
        warning = ""
        if tree_digest(old_path) != digest:
            warning = (f"{name} was written in {src_pool} during the switch; that copy is kept "
                       f"at {old_path} (not released) so those writes can be recovered")
            log.warning("tier move: %s", warning)
            snaps = []  # the kept copy keeps the move's snapshots too
        else:
            progress(95, f"releasing the copy in {src_pool}")
            delete_if_present(drv, src_pool, kind, name)  # the hot copy and the move's snapshots
    except BaseException:
        for snap in snaps:
            try:
                drv.delete_snapshot(src_pool, kind, name, snap)
            except DataplaneError as exc:  # the move's own error is what the user needs
                log.warning("tier move of %s: could not delete snapshot %s: %s",
                            name, snap, exc)
        raise
    finally:
        delete_if_present(drv, dst.name, kind, staging)
    result = {"kind": kind, "name": name, "from": src_pool, "to": dst.name, "path": new.path,
              "bytes": moved_bytes, "rounds": rounds, "tree_sha256": digest}
    if warning:
        result["warning"] = warning
    return result


def _switch(obj, dst: Pool, new_path: str, old_path: str, src_pool: str) -> None:
    """Point the row at the new copy and tell the services that serve it; if one refuses,
    point the row (and them) back at the old copy, drop the new copy and raise MoveFailed."""
    src = obj.pool
    with transaction.atomic():
        obj.pool, obj.path = dst, new_path
        obj.save(update_fields=["pool", "path", "updated_at"])
    try:
        moved.send(sender=type(obj), instance=obj, old_path=old_path, old_pool=src_pool)
    except Exception as exc:
        with transaction.atomic():
            obj.pool, obj.path = src, old_path
            obj.save(update_fields=["pool", "path", "updated_at"])
        try:
            moved.send(sender=type(obj), instance=obj, old_path=new_path, old_pool=dst.name,
                       undo=True)
        except Exception as back:  # the first refusal is what the user needs
            log.error("tier move of %s: pointing back at %s failed too: %s",
                      obj.name, old_path, back)
        try:
            delete_if_present(driver_for(dst.driver), dst.name, obj._meta.model_name, obj.name)
        except DataplaneError as gone:  # still held by a daemon: the refusal matters more
            log.error("tier move of %s: the new copy in %s stays: %s", obj.name, dst.name, gone)
        raise MoveFailed(f"{obj.name} stays in {src_pool}: what serves it could not follow "
                         f"it to {dst.name}: {exc}") from exc
