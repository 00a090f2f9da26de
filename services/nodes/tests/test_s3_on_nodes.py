"""The object service on cluster nodes: refused (409 ``s3_store_not_shared``) while the S3
buckets are in the file store (one gateway, the plane's data root); the node's own endpoint
``nodes/self/s3/`` answers the same. With the RADOS store the assignment is taken (the
config itself needs a Ceph pool: tests/test_ceph_cluster_s3.py)."""
import pytest
from django.conf import settings

from services.nodes import cluster
from tests.cluster_support import join_node

pytestmark = pytest.mark.django_db


@pytest.fixture()
def options():
    saved = settings.SERVICE_OPTIONS
    yield
    settings.SERVICE_OPTIONS = saved


def test_object_on_a_node_is_refused_with_the_file_store(api, options):
    settings.SERVICE_OPTIONS = {}
    node = join_node("n1", "10.0.0.1")
    r = api.patch("/api/v1/nodes/n1/", {"services": ["object"]}, format="json")
    assert r.status_code == 409, r.content
    assert r.json()["error"] == "s3_store_not_shared"
    assert "--s3-store rados" in r.json()["detail"]
    assert api.get("/api/v1/nodes/n1/").json()["services"] == []
    assert api.patch("/api/v1/nodes/n1/", {"services": ["file"]}, format="json").status_code == 200
    r = node.get("/api/v1/nodes/self/s3/")
    assert r.status_code == 409 and r.json()["error"] == "not_assigned", r.content

    settings.SERVICE_OPTIONS = {"s3_store": "rados"}
    r = api.patch("/api/v1/nodes/n1/", {"services": ["file", "object"]}, format="json")
    assert r.status_code == 200, r.content
    # no S3 pool yet: the node is told so, and retries
    r = node.get("/api/v1/nodes/self/s3/")
    assert r.status_code == 503 and r.json()["error"] == "s3_pool_missing", r.content
    assert api.patch("/api/v1/nodes/n1/", {"services": []}, format="json").status_code == 200
    cluster.remove("n1")
