"""A real Celery worker process killed with SIGKILL during a tier-down and during a
pre-warm, each slowed by the shared I/O budget so the kill lands mid-copy: the version's
bytes stay readable (the hot copy in the first case, the cold copy in the second), the
next worker's start marks the cut-off Job failed (plane/jobs.py reaper), and running it
again (the periodic tier-down, a new pre-warm request) completes with the same bytes."""
import os

import pytest

from plane.celery import app
from plane.models import Job
from services.checkpoints import tasks
from services.checkpoints.models import CheckpointVersion
from services.checkpoints.tests.conftest import save
from services.checkpoints.tests.test_tierdown import age, hashes, make_tiered_job
from services.protection.tests.helpers import WorkerProcess, kill_mid_copy
from tests.kit import wait_for, wait_job

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


def budget(api, **class_rates_mbps) -> None:
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": class_rates_mbps}, format="json")
    assert r.status_code == 200, r.json()


def restart_worker(data_dir, tmp_path, job_id: int) -> WorkerProcess:
    """A new worker process; on start it records the dead run's Job as failed."""
    worker = WorkerProcess(data_dir, tmp_path)
    wait_for(lambda: Job.objects.get(pk=job_id).state == "failed", 60, "the reaper")
    assert "interrupted" in Job.objects.get(pk=job_id).error
    return worker


def test_kill9_mid_tier_down_and_mid_prewarm(api, data_dir, tmp_path):
    make_tiered_job(api)
    v1 = save(api, "llm", 1, {f"rank{i}.bin": os.urandom(8 * MiB) for i in range(3)})
    save(api, "llm", 2)
    age(v1["id"])
    url = f"/api/v1/checkpoint-jobs/llm/versions/{v1['id']}/"
    before = hashes(v1["path"])
    budget(api, migration=4, prewarm=4)  # 24 MiB at 4 MiB/s: about 6 s per copy
    app.control.purge()

    # -- tier-down killed mid-copy: the hot copy is intact and still the version's
    worker = WorkerProcess(data_dir, tmp_path)
    try:
        [job_id] = tasks.tier_all()["jobs"]
        kill_mid_copy(job_id, worker)
        assert api.get(url).json()["tier"] == "hot"
        assert hashes(v1["path"]) == before
        assert tasks.tier_all()["jobs"] == []  # the dead run's Job still says running
        kept = {v["step"]: v["reasons"] for v in api.get(
            "/api/v1/checkpoint-jobs/llm/retention-preview/").json()["keep"]}
        assert "moving to the capacity pool" in kept[1]

        budget(api)  # the rerun needs no throttling
        worker = restart_worker(data_dir, tmp_path, job_id)
        [job_id] = tasks.tier_all()["jobs"]  # what the periodic task does next
        job = wait_job(api, f"/api/v1/jobs/{job_id}/", timeout=120)
        assert job["state"] == "succeeded", job
    finally:
        worker.kill9()
    version = CheckpointVersion.objects.get(pk=v1["id"])
    assert version.tier == "cold" and not os.path.exists(v1["path"])
    assert hashes(version.cold_path) == before

    # -- pre-warm killed mid-copy: the cold copy is intact; asking again finishes it
    budget(api, prewarm=4)
    worker = WorkerProcess(data_dir, tmp_path)
    try:
        r = api.post(f"{url}prewarm/")
        assert r.status_code == 202, r.json()
        job_id = r.json()["id"]
        kill_mid_copy(job_id, worker)
        assert api.get(url).json()["tier"] == "warming"
        assert hashes(version.cold_path) == before
        # while the dead Job still says running, a lease answers that Job (no second copy)
        r = api.post(f"{url}lease/", {"ttl_seconds": 600}, format="json")
        assert r.status_code == 201 and r.json()["prewarm_job"].endswith(f"/{job_id}/")
        lease = r.json()["id"]

        budget(api)
        worker = restart_worker(data_dir, tmp_path, job_id)
        assert api.get(url).json()["tier"] == "warming"
        r = api.post(f"{url}prewarm/")  # the warming version's Job is dead: a new one
        assert r.status_code == 202 and r.json()["id"] != job_id, r.json()
        job = wait_job(api, r.json()["url"], timeout=120)
        assert job["state"] == "succeeded", job
    finally:
        worker.kill9()
    assert api.get(url).json()["tier"] == "hot"
    assert hashes(v1["path"]) == before and hashes(version.cold_path) == before
    assert api.delete(f"/api/v1/checkpoint-leases/{lease}/").status_code == 204
