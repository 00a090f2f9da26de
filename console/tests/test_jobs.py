"""Jobs run by a real Celery worker over the real Redis broker."""
import os
import subprocess
import sys
import threading

import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun

from plane.celery import app
from plane.models import Job
from tests.kit import wait_for, wait_job

pytestmark = pytest.mark.root


def test_scrub_runs_as_a_job_and_reports_no_errors(api, worker):
    r = api.post("/api/v1/pools/", {"name": "p1", "driver": "local", "redundancy": "mirror",
                                    "devices": ["image:300M", "image:300M"]}, format="json")
    assert r.status_code == 201, r.json()
    r = api.post("/api/v1/pools/p1/scrub/")
    assert r.status_code == 202
    assert r["Location"].endswith(f"/api/v1/jobs/{r.json()['id']}/")
    job = wait_job(api, r.json()["id"])
    assert job["state"] == "succeeded", job
    assert job["progress"] == 100
    assert job["result"]["errors_uncorrectable"] == 0
    assert job["result"]["errors_corrected"] == 0
    assert job["result"]["bytes_scrubbed"] > 0
    assert job["bytes_done"] == job["bytes_total"] == job["result"]["bytes_scrubbed"], job
    assert job["rate_bytes_per_s"] > 0 and job["eta_seconds"] is None, job


def test_cancel_before_it_runs(api, transactional_db):
    api.post("/api/v1/pools/", {"name": "p1", "driver": "directory"}, format="json")
    job_id = api.post("/api/v1/pools/p1/scrub/").json()["id"]
    r = api.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    handled = threading.Event()

    def on_postrun(sender=None, args=None, **kwargs):  # in the worker's thread, this process
        if tuple(args or ()) == (job_id,):
            handled.set()

    task_postrun.connect(on_postrun, weak=False)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False):
            # the worker took the queued message and its task returned: it must not have run
            assert handled.wait(60), "the worker never handled the job's queued message"
    finally:
        task_postrun.disconnect(on_postrun)
    job = Job.objects.get(pk=job_id)
    assert job.state == "cancelled" and job.started_at is None


def test_failed_job_records_the_error(api, worker):
    api.post("/api/v1/pools/", {"name": "d1", "driver": "directory"}, format="json")
    job = wait_job(api, api.post("/api/v1/pools/d1/scrub/").json()["id"])
    assert job["state"] == "failed" and "scrub" in job["error"].lower()


def test_job_left_running_by_a_dead_worker_is_failed_when_a_worker_starts(transactional_db,
                                                                         settings):
    """A real `celery worker` process (the one `strata up` runs) reaps it at start."""
    stuck = Job.objects.create(kind="scrub", state="running", message="running")
    db = settings.DATABASES["default"]
    env = dict(os.environ, PYTHONPATH=str(settings.BASE_DIR), STRATA_DATABASE_URL=(
        f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"))
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "plane", "worker",
                               "--pool", "solo", "-n", f"reaper-{os.getpid()}@%h"],
                              env=env, cwd=settings.BASE_DIR, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:

        def reaped():
            stuck.refresh_from_db()
            return stuck.state != "running"

        wait_for(reaped, 60, "the new worker to reap the stuck job", interval=0.3)
    finally:
        worker.terminate()
        worker.wait(30)
    assert stuck.state == "failed" and "interrupted" in stuck.error
    assert stuck.finished_at is not None
