"""A tier move slowed by the I/O budget (set through the API) reports its bytes through the
Job API while it runs: bytes done rising, a total, a rate and an ETA; once it succeeded the
bytes done equal the total. Cancelled mid-copy, it stops, the file system stays where it was
with its bytes, and it can be moved again."""
import os
import time

import pytest

from services.protection.tests.helpers import file_hashes, write_files
from services.storage.models import FileSystem
from services.tiering.models import TierMove
from tests.kit import run_job, wait_for, wait_job

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


def _pools_and_slow_budget(api):
    for name, media in (("flash", "flash"), ("cap", "capacity")):
        r = api.post("/api/v1/pools/", {"name": name, "driver": "local", "media": media,
                                        "devices": ["image:300M"]}, format="json")
        assert r.status_code == 201, r.json()
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"migration": 2}}, format="json")
    assert r.status_code == 200, r.json()  # 16 MiB at 2 MiB/s: about 8 s of copying


def _filesystem(api, name):
    path = api.post("/api/v1/filesystems/", {"name": name, "pool": "flash"},
                    format="json").json()["path"]
    write_files(path, {f"shard-{i}": os.urandom(4 * MiB) for i in range(4)})
    return path


def test_running_move_reports_bytes_rate_and_eta(api, worker):
    _pools_and_slow_budget(api)
    _filesystem(api, "data")
    r = api.post("/api/v1/tier-moves/", {"filesystem": "data", "pool": "cap"}, format="json")
    assert r.status_code == 202, r.json()
    job_id = r.json()["id"]
    seen = []
    job = api.get(f"/api/v1/jobs/{job_id}/").json()
    while job["state"] in ("pending", "running"):
        if job["state"] == "running" and job["bytes_done"]:
            seen.append(job)
        time.sleep(0.3)
        job = api.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] == "succeeded", job
    done = [j["bytes_done"] for j in seen]
    assert len(set(done)) >= 3 and done == sorted(done), done  # rising while it ran
    assert all(j["bytes_total"] >= j["bytes_done"] for j in seen), seen
    assert max(j["bytes_total"] for j in seen) >= 16 * MiB  # about the file system's size
    assert all(j["rate_bytes_per_s"] > 0 for j in seen), seen
    assert all(j["eta_seconds"] is not None and j["eta_seconds"] >= 0 for j in seen), seen
    assert any(j["eta_seconds"] > 1 for j in seen), seen  # seconds left early on
    # done: what was moved, all of it, with the rate over the run and no ETA
    assert job["bytes_done"] == job["bytes_total"] >= 16 * MiB, job
    assert job["bytes_done"] == TierMove.objects.get(name="data").bytes_moved
    assert job["rate_bytes_per_s"] > 0 and job["eta_seconds"] is None, job


def test_cancel_mid_copy_leaves_the_source_readable_and_movable(api, worker):
    _pools_and_slow_budget(api)
    path = _filesystem(api, "data")
    before = file_hashes(path)
    r = api.post("/api/v1/tier-moves/", {"filesystem": "data", "pool": "cap"}, format="json")
    job_id = r.json()["id"]
    wait_for(lambda: (api.get(f"/api/v1/jobs/{job_id}/").json()["bytes_done"] or 0) >= 2 * MiB,
             60, "the copy to get going")
    r = api.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert r.status_code == 200, r.json()
    job = wait_job(api, job_id)
    assert job["state"] == "cancelled", job
    assert 2 * MiB <= job["bytes_done"] < 16 * MiB and job["eta_seconds"] is None, job
    fs = FileSystem.objects.get(name="data")
    assert fs.pool.name == "flash" and fs.path == path
    assert file_hashes(path) == before

    api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
    job = run_job(api, "/api/v1/tier-moves/", {"filesystem": "data", "pool": "cap"})
    assert job["state"] == "succeeded", job
    moved = FileSystem.objects.get(name="data")
    assert moved.pool.name == "cap" and file_hashes(moved.path) == before
