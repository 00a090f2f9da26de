"""`strata plane --s3-store rados` runs no gateway: its bucket API calls the admin interface of
the cluster nodes whose gateway runs (``service.admin_endpoints``), the next one when one
cannot be reached, and answers 503 JSON when none can. The nodes here are rows whose
heartbeats report a running gateway; the gateway they name is a real one (a local store: the
admin interface is the same code; with Ceph and real nodes: tests/test_ceph_cluster_s3.py)."""
from __future__ import annotations

import pytest

from services.nodes import cluster
from services.object import service
from services.object.tests.planefixture import plane  # noqa: F401 (plane: a fixture)
from tests.kit import free_port

pytestmark = pytest.mark.django_db(transaction=True)


def _node(name: str, s3_port: int, running: bool = True):
    key, _ = cluster.create_join_token()
    node, _ = cluster.join(key, name, "127.0.0.1", "127.0.0.1")
    node.services, node.options = ["object"], {"s3_port": s3_port}
    node.save()
    cluster.heartbeat(node, {"s3": {"state": "running" if running else "starting"}})
    return node


def test_the_bucket_api_of_a_plane_without_a_gateway_calls_the_nodes(plane, api, settings):
    settings.SERVICE_OPTIONS = {"plane_only": True, "s3_store": "rados"}
    none = api.post("/api/v1/buckets/", {"name": "nodes-a"}, format="json")
    assert none.status_code == 503 and none.json()["error"] == "no_s3_gateway", none.content
    assert "strata node assign" in none.json()["detail"]

    dead = _node("n0", free_port())             # tried first (by name), refuses connections
    _node("n1", plane.port)
    _node("n2", plane.port, running=False)      # not running: not called
    assert service.admin_endpoints() == [f"http://127.0.0.1:{dead.options['s3_port']}",
                                         f"http://127.0.0.1:{plane.port}"]
    made = api.post("/api/v1/buckets/", {"name": "nodes-a"}, format="json")
    assert made.status_code == 201, made.content
    assert "nodes-a" in [b["Name"] for b in plane.admin_s3.list_buckets()["Buckets"]]
    plane.admin_s3.put_object(Bucket="nodes-a", Key="k", Body=b"12345")
    row = api.get("/api/v1/buckets/nodes-a/").json()
    assert (row["used_bytes"], row["used_objects"]) == (5, 1), row
    refused = api.delete("/api/v1/buckets/nodes-a/")
    assert refused.status_code == 409 and refused.json()["error"] == "BucketNotEmpty"

    # every gateway listed is unreachable: 503, with where it tried
    cluster.Node.objects.filter(name="n1").update(options={"s3_port": free_port()})
    gone = api.delete("/api/v1/buckets/nodes-a/")
    assert gone.status_code == 503 and gone.json()["error"] == "gateway_unavailable", gone.content
    assert "127.0.0.1" in gone.json()["detail"]
    assert api.get("/api/v1/buckets/").status_code == 200     # the rows as last recorded
