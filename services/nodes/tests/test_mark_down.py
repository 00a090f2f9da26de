"""The plane's down detection (services.nodes.tasks.mark_down) with the broker's real Redis:
a node silent for DOWN_AFTER is written down, but only once the plane's worker and its web
server have been up that long; a plane back from an outage writes no node down for it."""
from datetime import timedelta

import pytest
from django.utils import timezone

from plane.broker import redis_client as broker
from services.nodes import cluster, tasks
from services.nodes.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_client():
    client = broker()
    client.delete(tasks.WATCHING_KEY, tasks.HEARING_KEY)
    yield client
    client.delete(tasks.WATCHING_KEY, tasks.HEARING_KEY)


def _long_ago(client, key: str) -> None:
    client.set(key, f"{tasks.time.time() - cluster.DOWN_AFTER - 1:.3f}")


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
    _long_ago(redis_client, tasks.WATCHING_KEY)
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
    _long_ago(redis_client, tasks.WATCHING_KEY)
    assert tasks.mark_down() == []
    assert Node.objects.get(name="n2").state == Node.State.UP
    cluster.remove("n2")


def test_a_web_server_back_from_an_outage_writes_no_node_down_until_it_heard_them(redis_client):
    """The worker ran all along; the web server (which takes the heartbeats) was away."""
    _silent_node("n3", 60)
    _long_ago(redis_client, tasks.WATCHING_KEY)
    tasks.started_hearing()                              # the web server starts again
    assert tasks.mark_down() == []
    assert Node.objects.get(name="n3").state == Node.State.UP
    _long_ago(redis_client, tasks.HEARING_KEY)           # DOWN_AFTER later, n3 still silent
    assert tasks.mark_down() == ["n3"]
    cluster.remove("n3")
