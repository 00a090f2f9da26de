"""The plane's down detection (services.nodes.tasks.mark_down) with the broker's real Redis:
a node silent for DOWN_AFTER is written down, but only once the plane's worker has been up
that long; a plane back from an outage writes no node down for the outage."""
from datetime import timedelta

import pytest
from celery import current_app
from django.utils import timezone

from services.nodes import cluster, tasks
from services.nodes.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_client():
    with current_app.connection_for_write() as conn:
        client = conn.default_channel.client
        client.delete(tasks.WATCHING_KEY)
        yield client
        client.delete(tasks.WATCHING_KEY)


def _silent_node(name: str, seconds: float) -> None:
    key, _ = cluster.create_join_token()
    cluster.join(key, name, "10.0.0.1", "10.0.0.1")
    Node.objects.filter(name=name).update(
        state=Node.State.UP, last_heartbeat=timezone.now() - timedelta(seconds=seconds))


def test_a_plane_back_from_an_outage_writes_no_node_down_until_it_heard_them(redis_client):
    _silent_node("n1", 60)         # its last heartbeat before the plane went away
    tasks.forget_watching()                              # the plane's worker starts
    assert tasks.mark_down() == []                       # its first run
    assert Node.objects.get(name="n1").state == Node.State.UP
    # DOWN_AFTER later, and n1 still silent: written down
    redis_client.set(tasks.WATCHING_KEY, f"{tasks.time.time() - cluster.DOWN_AFTER - 1:.3f}")
    assert tasks.mark_down() == ["n1"]
    assert Node.objects.get(name="n1").state == Node.State.DOWN
    tasks.forget_watching()                              # the worker restarted again
    Node.objects.filter(name="n1").update(state=Node.State.UP)
    assert tasks.mark_down() == []
    cluster.remove("n1")


def test_a_node_that_heartbeats_within_the_first_runs_stays_up(redis_client):
    _silent_node("n2", 60)
    tasks.forget_watching()
    assert tasks.mark_down() == []
    Node.objects.filter(name="n2").update(last_heartbeat=timezone.now())   # its retry
    redis_client.set(tasks.WATCHING_KEY, f"{tasks.time.time() - cluster.DOWN_AFTER - 1:.3f}")
    assert tasks.mark_down() == []
    assert Node.objects.get(name="n2").state == Node.State.UP
    cluster.remove("n2")
