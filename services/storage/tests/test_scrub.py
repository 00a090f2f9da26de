"""A pool scrub draws from the shared background I/O budget (class ``scrub``), on a real
btrfs pool on a loop device: the kernel's scrub is held to the class rate, and while
foreground traffic is on it is paused (``btrfs scrub cancel`` keeps its place) and resumed
once the foreground is gone; it still reads every byte, with no errors. Its Job shows the
bytes as they go and that it is paused; the kernel's scrub limit is put back afterwards."""
import os
import time

import pytest

from dataplane.local import btrfs
from dataplane.runner import Runner
from services.protection.tests.helpers import write_files
from services.storage.models import Pool
from plane import iobudget
from tests.kit import wait_for, wait_job

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


def pool_with_data(api):
    """Pool `p` (a 1 GiB image) holding 256 MiB in file system `data`: its mount point."""
    r = api.post("/api/v1/pools/", {"name": "p", "driver": "local",
                                    "devices": ["image:1G"]}, format="json")
    assert r.status_code == 201, r.json()
    path = api.post("/api/v1/filesystems/", {"name": "data", "pool": "p"},
                    format="json").json()["path"]
    write_files(path, {f"blob-{i}": os.urandom(32 * MiB) for i in range(8)})
    os.sync()
    return Pool.objects.get(name="p").mountpoint


def test_scrub_yields_to_the_budget_and_foreground_and_still_completes(api, worker):
    limits = btrfs.scrub_speed_files(pool_with_data(api))
    assert limits and all(f.read_text().strip() == "0" for f in limits)
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"scrub": 32}}, format="json")
    assert r.status_code == 200, r.json()
    seen = []

    def look():
        job = api.get(url).json()
        seen.append((job["bytes_done"], job["message"]))
        return job
    try:
        r = api.post("/api/v1/pools/p/scrub/")
        assert r.status_code == 202, r.json()
        url = f"/api/v1/jobs/{r.json()['id']}/"
        wait_for(lambda: (look()["bytes_done"] or 0) >= 32 * MiB, 60, "the scrub to get going")
        assert all(f.read_text().strip() != "0" for f in limits)  # the kernel paces it
        # a foreground client is busy for 3 s: the scrub pauses
        until = time.monotonic() + 3
        while time.monotonic() < until:
            iobudget.foreground()
            look()
            time.sleep(0.1)
        job = wait_for(lambda: (lambda j: j["state"] not in ("pending", "running") and j)(
            look()), 120, "the scrub to finish")
    finally:
        api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")

    assert job["state"] == "succeeded", job
    result = job["result"]
    assert result["pauses"] >= 1, result
    assert result["errors_corrected"] == 0 and result["errors_uncorrectable"] == 0, result
    assert result["bytes_scrubbed"] >= 256 * MiB, result  # every byte, across its resumes
    assert job["bytes_done"] == job["bytes_total"] == result["bytes_scrubbed"], job
    # while it ran: rising byte counts, and the Job said when it waited for the budget
    done = [d for d, _ in seen if d]
    assert len(set(done)) >= 2 and done == sorted(done), seen
    assert any("paused for the I/O budget" in m for _, m in seen), seen
    assert all(f.read_text().strip() == "0" for f in limits)  # the kernel's limit is back


def test_a_killed_workers_scrub_is_stopped_and_run_again_by_the_next_worker(api, data_dir, tmp_path):
    """``kill -9`` of the worker mid-scrub leaves the kernel scrubbing with nobody pacing it;
    the next worker to start stops that scrub, lifts the kernel's limit and, a scrub being
    idempotent, queues the Job again: it runs to the end."""
    from services.protection.tests.helpers import WorkerProcess
    from plane.celery import app

    mnt = pool_with_data(api)
    limits = btrfs.scrub_speed_files(mnt)
    runner = Runner()
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"scrub": 8}}, format="json")
    assert r.status_code == 200, r.json()
    app.control.purge()
    proc = WorkerProcess(data_dir, tmp_path)
    try:
        r = api.post("/api/v1/pools/p/scrub/")
        assert r.status_code == 202, r.json()
        url = f"/api/v1/jobs/{r.json()['id']}/"
        wait_for(lambda: (api.get(url).json()["bytes_done"] or 0) >= 16 * MiB, 120,
                 "the scrub to get going")
    finally:
        proc.kill9()
    api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
    # the worker is gone; the kernel scrubs on, at the limit it was left
    assert btrfs.scrub_status(runner, mnt)["status"] == "running"
    assert all(f.read_text().strip() != "0" for f in limits)

    proc = WorkerProcess(data_dir, tmp_path)
    try:
        job = wait_job(api, url, timeout=180)
    finally:
        proc.kill9()
    # a scrub is idempotent: stopped (a second `btrfs scrub start` would be refused) and run
    # again from the start, to the end
    assert job["state"] == "succeeded", job
    assert job["result"]["bytes_scrubbed"] >= 256 * MiB, job["result"]
    assert btrfs.scrub_status(runner, mnt)["status"] != "running"
    assert all(f.read_text().strip() == "0" for f in limits)
