"""Ceph pools through the API and CLI, on the session's development cluster: what a user
gets back (health with its failure domains, RBD volumes), bad requests refused with the
reason and nothing created, an unreachable cluster a 503 while local pools keep serving."""
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from plumbing.process import free_port
from services.storage.models import Pool, Volume
from tests.ceph import ceph_pool_body

pytestmark = [pytest.mark.root, pytest.mark.django_db]
MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[3]


def rados_pools(cluster) -> set:
    return {p["pool_name"] for p in cluster.command("osd pool ls", detail="detail")}


def test_a_ceph_pool_reports_health_per_failure_domain_and_holds_volumes(api, ceph_cluster):
    name = f"cp-{uuid.uuid4().hex[:6]}"
    r = api.post("/api/v1/pools/", ceph_pool_body(ceph_cluster, name, failure_domain="host",
                                             redundancy="replicated:3"), format="json")
    assert r.status_code == 201, r.json()
    pool = r.json()
    assert pool["state"] == "online" and pool["redundancy"] == "replicated:3"
    assert pool["size_bytes"] > 0
    assert pool["health_detail"]["status"] == "HEALTH_OK", pool["health_detail"]
    assert pool["health_detail"]["failed_domains"] == []
    assert sorted(d["fault_domain"] for d in pool["device_status"]) == ["host0", "host1",
                                                                        "host2"]
    assert pool["ceph"]["failure_domain"] == "host"
    assert f"strata.{name}" in rados_pools(ceph_cluster)
    rule = ceph_cluster.command("osd crush rule dump", name="strata-replicated-host")
    assert [s.get("type") for s in rule["steps"] if s["op"].startswith("chooseleaf")] == ["host"]

    r = api.post("/api/v1/volumes/", {"name": f"{name}-v", "pool": name,
                                      "size_bytes": 64 * MiB}, format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["path"].startswith(f"rbd:strata.{name}/{name}-v:")
    r = api.post(f"/api/v1/volumes/{name}-v/resize/", {"size_bytes": 128 * MiB}, format="json")
    assert r.status_code == 200 and r.json()["size_bytes"] == 128 * MiB
    r = api.post("/api/v1/snapshots/", {"name": "s1", "volume": f"{name}-v"}, format="json")
    assert r.status_code == 201, r.json()
    assert api.delete(f"/api/v1/volumes/{name}-v/").status_code == 204
    assert api.delete(f"/api/v1/pools/{name}/").status_code == 204
    assert f"strata.{name}" not in rados_pools(ceph_cluster)


@pytest.mark.parametrize("extra,field,reason", [
    ({"failure_domain": "row"}, "failure_domain", "not a valid choice"),
    ({"redundancy": "replicated:4"}, None, "needs 4 hosts as failure domains; the cluster "
                                           "has 3"),
    ({"redundancy": "replicated:2", "failure_domain": "rack"}, None, "the cluster has 0"),
    ({"ceph_conf": "/nonexistent/ceph.conf"}, None, "does not exist"),
    ({"redundancy": "ec:2+1", "failure_domain": "osd", "min_size": 1}, None,
     "the Ceph cluster refused"),
    ({"redundancy": "raid5"}, "redundancy", ""),
])
def test_bad_ceph_pool_requests_are_400_with_the_reason_and_create_nothing(
        api, ceph_cluster, extra, field, reason):
    before = rados_pools(ceph_cluster)
    profiles = set(ceph_cluster.command("osd erasure-code-profile ls"))
    r = api.post("/api/v1/pools/", ceph_pool_body(ceph_cluster, "bad", **extra), format="json")
    assert r.status_code == 400, r.json()
    body = r.json()
    assert body["error"] == "invalid" or body["error"] == "insufficient_devices", body
    if field:
        assert field in body["fields"]
    assert reason in body["detail"] or reason in json.dumps(body.get("fields", {})), body
    assert not Pool.objects.exists()
    assert rados_pools(ceph_cluster) == before
    assert set(ceph_cluster.command("osd erasure-code-profile ls")) == profiles


def test_an_unreachable_cluster_is_a_503_and_local_pools_keep_serving(api, ceph_cluster,
                                                                      tmp_path):
    conf = tmp_path / "ceph.conf"     # a cluster whose monitor does not answer
    conf.write_text(f"[global]\nmon_host = v2:127.0.0.1:{free_port()}\n"
                    f"[client]\nkeyring = {ceph_cluster.keyring}\n")
    r = api.post("/api/v1/pools/", {"name": "gone", "driver": "ceph", "ceph_conf": str(conf)},
                 format="json")
    assert r.status_code == 503, r.json()
    assert r.json()["error"] == "unavailable" and "does not answer" in r.json()["detail"]
    assert not Pool.objects.filter(name="gone").exists()
    r = api.post("/api/v1/pools/", {"name": "d1", "driver": "directory"}, format="json")
    assert r.status_code == 201, r.json()
    r = api.post("/api/v1/volumes/", {"name": "v", "pool": "d1", "size_bytes": MiB},
                 format="json")
    assert r.status_code == 201 and Volume.objects.filter(name="v").exists()


def test_strata_pool_create_on_ceph_from_the_cli(live_server_cli, ceph_cluster):
    name = f"cli-{uuid.uuid4().hex[:6]}"
    out = live_server_cli("pool", "create", name, "--driver", "ceph", "--ceph-conf",
                          str(ceph_cluster.conf), "--client", ceph_cluster.client,
                          "--failure-domain", "osd", "--redundancy", "replicated:2")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["redundancy"] == "replicated:2"
    bad = live_server_cli("pool", "create", "x", "--driver", "ceph", "--ceph-conf",
                          "/nonexistent.conf")
    assert bad.returncode == 1 and "does not exist" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert live_server_cli("pool", "delete", name).returncode == 0


@pytest.fixture
def live_server_cli(api, live_server):
    """Run `strata --json ...` against the live test server with the admin's token."""
    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/",
           "STRATA_TOKEN": api.token, "PYTHONPATH": str(ROOT)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "console.cli.main", "--json", *args],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return run
