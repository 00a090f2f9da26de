"""The manual tier-down trigger, `POST .../versions/{id}/tier-down/`: an operator moves a
superseded version to the capacity pool now, before `tier_after`; the latest, a leased, a
writing, an aborted or an already cold version get a 409 saying why, a job without a
capacity pool a 400. The same through `strata checkpoint tier-down` and the timeline page."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from services.checkpoints import tierdown
from services.checkpoints.models import CheckpointVersion
from services.checkpoints.tests.conftest import begin, save
from services.checkpoints.tests.test_tierdown import hashes, make_tiered_job
from tests.kit import wait_job

pytestmark = [pytest.mark.root]
MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[3]


def trigger(client, version_id, job="llm"):
    return client.post(f"/api/v1/checkpoint-jobs/{job}/versions/{version_id}/tier-down/")


def test_an_operator_moves_a_version_now_and_is_told_why_others_cannot(
        api, operator_api, viewer_api, worker):
    make_tiered_job(api, tier_after="1 00:00:00")  # a day: nothing is due by itself
    v1 = save(api, "llm", 1, {f"rank{i}.bin": os.urandom(MiB + i) for i in range(2)})
    v2 = save(api, "llm", 2)
    writing = begin(api, "llm", 3)
    aborted = begin(api, "llm", 4)
    assert api.post(f"/api/v1/checkpoint-jobs/llm/versions/{aborted['id']}/abort/"
                    ).status_code == 200
    before = hashes(v1["path"])
    assert list(tierdown.due()) == []

    for version, reason in ((v2, "latest"), (writing, "writing"), (aborted, "aborted")):
        r = trigger(operator_api, version["id"])
        assert r.status_code == 409 and reason in r.json()["detail"], r.json()
    r = api.post(f"/api/v1/checkpoint-jobs/llm/versions/{v1['id']}/lease/",
                 {"ttl_seconds": 600}, format="json")
    lease = r.json()["id"]
    r = trigger(operator_api, v1["id"])
    assert r.status_code == 409 and "leased" in r.json()["detail"], r.json()
    assert api.delete(f"/api/v1/checkpoint-leases/{lease}/").status_code == 204
    assert trigger(viewer_api, v1["id"]).status_code == 403

    r = trigger(operator_api, v1["id"])
    assert r.status_code == 202, r.json()
    assert r["Location"] == r.json()["job"] and r.json()["kind"] == "checkpoint-tier-down"
    job = wait_job(api, r.json()["job"])
    assert job["state"] == "succeeded", job
    version = CheckpointVersion.objects.get(pk=v1["id"])
    assert version.tier == "cold" and hashes(version.cold_path) == before
    assert not os.path.exists(v1["path"])
    r = trigger(operator_api, v1["id"])
    assert r.status_code == 409 and "already cold" in r.json()["detail"], r.json()
    assert trigger(operator_api, 999999).status_code == 404


def test_a_job_without_a_capacity_pool_is_a_400(api):
    make_tiered_job(api)
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "plain", "filesystem": "train"},
                 format="json")
    assert r.status_code == 201, r.json()
    v1 = save(api, "plain", 1)
    save(api, "plain", 2)
    r = trigger(api, v1["id"], job="plain")
    assert r.status_code == 400 and "capacity_pool" in r.json()["fields"], r.json()
    assert CheckpointVersion.objects.get(pk=v1["id"]).tier == "hot"


def test_timeline_page_offers_tier_down_for_superseded_hot_versions_only(api):
    make_tiered_job(api, tier_after="1 00:00:00")
    v1 = save(api, "llm", 1)
    v2 = save(api, "llm", 2)
    browser = Client()
    browser.force_login(api.user)
    html = browser.get("/console/checkpoints/llm/").content.decode()
    button = 'data-url="/api/v1/checkpoint-jobs/llm/versions/{key}/tier-down/" data-key="%d"'
    assert button % v1["id"] in html
    assert button % v2["id"] not in html  # the latest stays hot


def test_strata_checkpoint_tier_down_through_the_cli(api, worker, live_server):
    make_tiered_job(api, tier_after="1 00:00:00")
    v1 = save(api, "llm", 1, {"rank0.bin": os.urandom(MiB)})
    save(api, "llm", 2)
    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/",
           "STRATA_TOKEN": api.token, "PYTHONPATH": str(ROOT)}

    def strata(*args):
        return subprocess.run([sys.executable, "-m", "console.cli.main", *args], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    r = strata("checkpoint", "tier-down", "llm", str(v1["id"]))
    assert r.returncode == 0 and "succeeded" in r.stdout, r.stdout + r.stderr
    assert CheckpointVersion.objects.get(pk=v1["id"]).tier == "cold"
    r = strata("checkpoint", "tier-down", "llm", str(v1["id"]))
    assert r.returncode == 1 and "already cold" in r.stderr and "(409)" in r.stderr, r.stderr
