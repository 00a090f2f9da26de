"""The plane's side of NVMe-oF exports of Ceph volumes served by two nodes
(services/block/paths.py): which nodes get the paths, what each node's heartbeat digest
follows, the failover when a node is written down, and a node coming back. Rows only (the
nodes' side, with real nvmf_tgt and Ceph, is tests/test_ceph_cluster_nvmf.py); the paths
here have no librbd client recorded, so the failover fences nothing."""
from datetime import timedelta

import pytest
from django.utils import timezone

from services.block import paths, service
from services.nodes import cluster
from services.nodes.models import Node
from services.storage.models import Pool, Volume

pytestmark = pytest.mark.django_db
RUNNING = {"nvmf_tgt": {"state": "running"}}


def node(name, address, services=("block",), daemons=RUNNING, **kw):
    return Node.objects.create(name=name, management_address=address, data_address=address,
                               state=Node.State.UP, services=list(services), daemons=daemons,
                               last_heartbeat=timezone.now(), options={"nvmf_port": 4421},
                               **kw)


@pytest.fixture
def volume():
    pool = Pool.objects.create(name="shared", driver="ceph")
    return Volume.objects.create(name="vm", pool=pool, size_bytes=1 << 24,
                                 path="rbd:strata.shared/vm:id=admin:conf=/etc/ceph/ceph.conf")


def test_paths_on_two_serving_nodes_and_the_failover(volume):
    node("alpha", "10.0.0.2")
    node("beta", "10.0.0.3")
    node("gamma", "10.0.0.4", daemons={"nvmf_tgt": {"state": "backoff"}})   # not serving
    node("delta", "10.0.0.5", services=())                                 # no block
    node("local", "10.0.0.6", local=True)                 # the host of `strata up`
    exp = service.create_export(volume=volume, protocol="nvmf", allow_any=True)
    got = exp.connection
    assert [(p["node"], p["traddr"], p["trsvcid"], p["ana_state"], p["target_index"])
            for p in got["paths"]] == [("alpha", "10.0.0.2", "4421", "optimized", 0),
                                       ("beta", "10.0.0.3", "4421", "non_optimized", 1)]
    assert (got["traddr"], got["subsystem_nqn"]) == ("10.0.0.2",
                                                     "nqn.2026-01.io.strata:rbd.strata.shared.vm")

    revision = Node.objects.get(name="beta").revision
    assert paths.fail_over(["alpha"]) == [(exp.export_id, "beta")]
    exp.refresh_from_db()
    assert [p["ana_state"] for p in exp.connection["paths"]] == ["inaccessible", "optimized"]
    assert exp.connection["traddr"] == "10.0.0.3"
    assert Node.objects.get(name="beta").revision > revision    # beta reconciles
    # a second export goes to the node with the fewer optimized paths
    other = Volume.objects.create(name="vm2", pool=volume.pool, size_bytes=1 << 24,
                                  path="rbd:strata.shared/vm2:id=admin:conf=/x.conf")
    second = service.create_export(volume=other, protocol="nvmf", allow_any=True)
    assert [p["node"] for p in second.connection["paths"]][0] == "alpha"
    assert second.state == "pending"

    # alpha, written down, heartbeats again: its path comes back non-optimized; the
    # optimized one stays where it is
    Node.objects.filter(name="alpha").update(state=Node.State.DOWN)
    cluster.heartbeat(Node.objects.get(name="alpha"), RUNNING)
    exp.refresh_from_db()
    assert [p["ana_state"] for p in exp.connection["paths"]] == ["non_optimized", "optimized"]
    service.delete_export(exp)
    assert not paths.heal("alpha")


def test_one_host_without_serving_nodes_keeps_its_own_target(volume):
    node("alpha", "10.0.0.2", daemons={})
    Node.objects.filter(name="alpha").update(last_heartbeat=timezone.now() - timedelta(60))
    assert paths.wanted(volume) == []


def test_a_drained_nodes_path_moves_to_another_node_or_is_removed(volume):
    node("alpha", "10.0.0.2")
    node("beta", "10.0.0.3")
    node("gamma", "10.0.0.4")
    exp = service.create_export(volume=volume, protocol="nvmf", allow_any=True)
    assert [p["node"] for p in exp.connection["paths"]] == ["alpha", "beta"]

    # the optimized node drained: beta (connected already) becomes optimized, gamma takes
    # alpha's path and its controller-ID range, non-optimized
    revision = Node.objects.get(name="gamma").revision
    cluster.drain("alpha")
    exp.refresh_from_db()
    assert [(p["node"], p["ana_state"], p["target_index"]) for p in exp.connection["paths"]] == [
        ("gamma", "non_optimized", 0), ("beta", "optimized", 1)]
    assert exp.connection["traddr"] == "10.0.0.3" and exp.error == ""
    assert Node.objects.get(name="gamma").revision > revision     # gamma serves it

    # no other node left to take beta's path: it is removed, the reason shown
    cluster.drain("beta")
    exp.refresh_from_db()
    assert [(p["node"], p["ana_state"]) for p in exp.connection["paths"]] == [
        ("gamma", "optimized")]
    assert [r["node"] for r in exp.connection["removed"]] == ["beta"]
    assert "node beta was drained and no other node" in exp.connection["removed"][0]["reason"]
    assert exp.state != "error"
