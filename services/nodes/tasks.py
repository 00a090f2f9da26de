from celery import shared_task

from services.nodes import cluster


@shared_task(name="nodes.mark_down")
def mark_down() -> list[str]:
    """Nodes whose heartbeats stopped are written down (see cluster.DOWN_AFTER)."""
    return cluster.mark_down()
