"""What one heartbeat costs the plane's database: it bounds how many nodes a plane holds
(bench/cluster_idle.py multiplies it out)."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from services.nodes import cluster

pytestmark = pytest.mark.django_db


def test_a_heartbeat_is_two_statements_and_writes_no_audit_row():
    from plane.models import AuditEvent

    key, _ = cluster.create_join_token()
    _node, answer = cluster.join(key, "n1", "10.0.0.1", "10.0.0.1")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {answer['credential']}")
    with CaptureQueriesContext(connection) as queries:
        r = client.post("/api/v1/nodes/heartbeat/", {"daemons": {"tgtd": {"state": "running"}}},
                        format="json")
    assert r.status_code == 200 and r.json()["name"] == "n1"
    statements = [q["sql"].split()[0] for q in queries.captured_queries]
    assert statements == ["SELECT", "UPDATE"], queries.captured_queries
    assert not AuditEvent.objects.filter(path="/api/v1/nodes/heartbeat/").exists()
    assert cluster.node_for(answer["credential"]).state == "up"
    cluster.remove("n1")          # its database role (on PostgreSQL) goes with it
    assert cluster.node_for(answer["credential"]) is None
