"""Console pages render for each role (the browser journey is in tests/test_console_browser.py)."""
import pytest
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db


@pytest.fixture
def logged_in(client, data_dir):
    def as_role(role):
        from conftest import _user

        _user(role, role)
        client.force_login(User.objects.get(username=role))
        return client
    return as_role


def test_root_leads_to_login(client):
    r = client.get("/", follow=True)
    assert r.redirect_chain[-1][0].startswith("/login/")


@pytest.mark.parametrize("slug", ["pools", "filesystems", "volumes", "snapshots", "jobs", "audit"])
def test_every_page_renders_for_a_viewer_without_change_buttons(logged_in, slug):
    c = logged_in("viewer")
    r = c.get(f"/console/{slug}/")
    assert r.status_code == 200
    assert b"data-api-action" not in r.content and b"details class=\"create\"" not in r.content


def test_admin_sees_create_forms_and_users(logged_in):
    c = logged_in("admin")
    assert b"details class=\"create\"" in c.get("/console/pools/").content
    assert c.get("/console/users/").status_code == 200
    r = c.get("/console/")
    assert r.status_code == 200 and b"Capacity" in r.content


def test_users_page_is_for_admins_only(logged_in):
    r = logged_in("operator").get("/console/users/")
    assert r.status_code == 302


def test_metrics_endpoint_speaks_prometheus(client, data_dir):
    r = client.get("/metrics")
    assert r.status_code == 200
    assert b"# TYPE strata_pool_size_bytes gauge" in r.content
    assert b'strata_jobs{state="failed"} 0' in r.content


@pytest.mark.parametrize("slug", ["snapshot-schedules", "replication-peers", "replications",
                                  "replicas", "backup-targets", "backups", "restore-points",
                                  "checkpoint-jobs"])
def test_service_pages_render(logged_in, slug):
    r = logged_in("admin").get(f"/console/{slug}/")
    assert r.status_code == 200 and b"<h1>" in r.content


def test_dashboard_alerts_on_replication_lag_and_failed_jobs(logged_in):
    from datetime import timedelta

    from django.utils import timezone

    from plane.models import Job
    from services.protection.models import Replication, ReplicationPeer
    from services.storage.models import FileSystem, Pool

    pool = Pool.objects.create(name="p", driver="directory")
    fs = FileSystem.objects.create(name="fs", pool=pool)
    peer = ReplicationPeer.objects.create(name="dr", url="http://127.0.0.1:1/", token="t")
    Replication.objects.create(name="to-dr", filesystem=fs, peer=peer, target_pool="default",
                               target_name="fs", every_minutes=10,
                               last_snapshot_at=timezone.now() - timedelta(hours=2))
    Job.objects.create(kind="scrub", target_name="p", state="failed", error="disk on fire",
                       finished_at=timezone.now())
    body = logged_in("admin").get("/console/").content.decode()
    assert "Replication to-dr lags 120 min" in body
    assert "disk on fire" in body


def test_dashboard_shows_each_daemon_restarts_and_last_exit(logged_in, data_dir):
    from console.daemons import write_states

    write_states(data_dir, {
        "tgtd": {"state": "running", "pid": 4242, "restarts": 1, "started_at": "t1",
                 "log": "/x/tgtd.log",
                 "last_exit": {"code": None, "signal": "SIGKILL", "at": "2026-01-02T03:04:05"}},
        "smbd": {"state": "failed", "pid": None, "restarts": 4, "started_at": "t2",
                 "log": "/x/smbd.log", "last_exit": {"code": 1, "signal": None, "at": "t3"}}})
    page = logged_in("viewer").get("/console/").content.decode()
    assert "<h2>Daemons</h2>" in page
    assert 'data-daemon="tgtd"' in page and "SIGKILL at 2026-01-02T03:04:05" in page
    assert "code 1 at t3" in page
    assert "smbd keeps exiting at once; strata up gave up starting it" in page


def test_dashboard_and_nodes_page_show_the_cluster_a_silent_node_down(logged_in):
    from datetime import timedelta

    from django.utils import timezone

    from services.nodes.models import Node

    now = timezone.now()
    Node.objects.create(name="alive", management_address="10.0.0.1", data_address="10.0.0.1",
                        state="up", last_heartbeat=now, services=["block"],
                        daemons={"tgtd": {"state": "running"}})
    Node.objects.create(name="silent", management_address="10.0.0.2", data_address="10.0.0.2",
                        state="up", last_heartbeat=now - timedelta(seconds=16),
                        daemons={"tgtd": {"state": "running"}})
    viewer = logged_in("viewer")
    page = viewer.get("/console/").content.decode()
    assert "<h2>Cluster</h2>" in page
    alive = page.split('data-node="alive"')[1].split("</tr>")[0]
    silent = page.split('data-node="silent"')[1].split("</tr>")[0]
    assert "state up" in alive and "tgtd <span class=\"state running\">" in alive
    assert "state down" in silent and "tgtd <span class=\"state unknown\">" in silent
    assert "Node silent is down" in page
    nodes = viewer.get("/console/nodes/").content.decode()
    assert "silent" in nodes and "tgtd unknown" in nodes and "tgtd running" in nodes
