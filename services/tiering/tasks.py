"""Celery tasks of tiering: tier moves run as Jobs. When a worker starts, moves cut off by
the previous worker's crash or kill are recorded as failed and what they left behind (the
move's snapshots, the half-received copy) is removed; one cut off after its switch is
completed by a task queued then."""
import logging

from celery import shared_task
from celery.signals import worker_ready

from plane.jobs import job_task, start_job
from services.tiering import moves
from services.tiering.models import TierMove

log = logging.getLogger(__name__)


@job_task("tiering.move_job")
def move_job(ctx, move: int):
    """Move a file system or volume to another pool, keeping its name."""
    return moves.move(TierMove.objects.get(pk=move), ctx.progress)


def start_move(obj, pool, user=None) -> TierMove:
    """Check, record and queue a move; the TierMove row links its Job."""
    moves.check_movable(obj, pool)
    kind = obj._meta.model_name
    record = TierMove.objects.create(kind=kind, name=obj.name, from_pool=obj.pool.name,
                                     to_pool=pool.name)
    record.job = start_job("tier-move", move_job, user=user, target=(kind, obj.name),
                           params={"move": record.pk})
    record.save(update_fields=["job"])
    return record


@shared_task(name="tiering.complete_switched_move")
def complete_switched_move(move: int):
    """Complete a move its worker was killed in after the switch (see moves)."""
    moves.complete_switched(move)


@worker_ready.connect
def fail_interrupted_moves(**_):
    """A move still `running` when a worker starts was cut off with the previous worker
    (one worker per appliance, as plane.jobs assumes): fail it and clear its leftovers,
    or, if it had switched, queue its completion."""
    try:
        moves.fail_interrupted(finish=complete_switched_move.delay)
    except Exception:  # noqa: BLE001 - the worker must start; the next move clears them too
        log.exception("could not clear the leftovers of interrupted tier moves")
