"""Celery tasks of tiering: tier moves run as Jobs."""
from console.jobs import job_task, start_job
from services.tiering import moves
from services.tiering.models import TierMove


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
