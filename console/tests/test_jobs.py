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


def _pool_children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def test_sweeper_requeues_a_lost_message_and_reruns_a_job_whose_worker_was_killed(
        api, transactional_db, data_dir, tmp_path, settings):
    """Real faults, a real prefork worker (as `strata up` runs it) on the real broker: the
    queue flushed under a pending job, and the worker's child killed with SIGKILL mid-scrub.
    The sweeper (what beat runs every STRATA_JOB_SWEEP_INTERVAL s) is called here directly,
    with its times shortened."""
    import services.storage.tasks  # noqa: F401  (its tasks, idempotent ones among them)
    from plane import tasks as sweeper
    from services.protection.tests.helpers import WorkerProcess

    assert settings.CELERY_BEAT_SCHEDULE["sweep-jobs"]["task"] == "plane.sweep_jobs"
    settings.STRATA_JOB_STALE_PENDING = 0
    settings.STRATA_JOB_STALE_RUNNING = 3
    r = api.post("/api/v1/pools/", {"name": "p1", "driver": "local", "redundancy": "mirror",
                                    "devices": ["image:300M", "image:300M"]}, format="json")
    assert r.status_code == 201, r.json()
    fs = api.post("/api/v1/filesystems/", {"name": "f1", "pool": "p1"}, format="json").json()
    with open(os.path.join(fs["path"], "data"), "wb") as f:
        f.write(os.urandom(48 << 20))
        os.fsync(f.fileno())
    app.control.purge()

    # -- the message of a pending job lost (the queue flushed): it is queued again
    job_id = api.post("/api/v1/pools/p1/scrub/").json()["id"]
    assert job_id in sweeper.queued_job_ids()
    app.control.purge()
    assert job_id not in sweeper.queued_job_ids()
    assert sweeper.sweep_jobs()["pending"]["requeued"] == [job_id]
    assert job_id in sweeper.queued_job_ids()

    # -- a worker runs it, slowed by the I/O budget; its child is killed mid-scrub: the
    # heartbeat stops, and the sweeper queues the (idempotent) scrub again
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"scrub": 2}}, format="json")
    assert r.status_code == 200, r.json()
    worker = WorkerProcess(data_dir, tmp_path, pool="prefork",
                           extra_env={"STRATA_JOB_HEARTBEAT": "0.5"})
    try:
        wait_for(lambda: (Job.objects.get(pk=job_id).bytes_done or 0) > 0, 60,
                 "the scrub to run")
        [child] = _pool_children(worker.proc.pid)
        os.kill(child, 9)
        row = Job.objects.get(pk=job_id)
        assert row.state == "running" and row.progress < 100, row.message
        assert sweeper.sweep_jobs()["running"] == {"rerun": [], "failed": []}  # not yet stale
        r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
        assert r.status_code == 200, r.json()
        swept = wait_for(lambda: sweeper.sweep_jobs()["running"]["rerun"], 30,
                         "the sweeper to see the heartbeat stop", interval=0.5)
        assert swept == [job_id]
        job = wait_job(api, job_id, timeout=120)  # run by the worker's new child
        assert job["state"] == "succeeded", job
        assert job["result"]["errors_uncorrectable"] == 0
        assert job["result"]["bytes_scrubbed"] > 48 << 20
    finally:
        worker.kill9()


def test_messages_held_by_a_worker_killed_for_good_run_again_within_minutes(
        api, transactional_db, data_dir, tmp_path, settings):
    """A worker on node n1 (prefork, taking a second message while its child runs the first,
    as a busy worker does) is killed with SIGKILL, child and all, mid-scrub, never to return;
    the worker of node n2 runs on. The pending job whose message n1 held runs once that
    message is STRATA_TASK_VISIBILITY_TIMEOUT s old (5 here; 300 by default; with kombu's
    hour this test fails), without the sweeper; the cut-off scrub is the sweeper's (called
    directly, times shortened), and its rerun succeeds on n2 whenever n1's message of it
    comes back (see test_a_message_arriving_during_the_clean_up_of_a_rerun_runs_nothing)."""
    import services.storage.tasks  # noqa: F401  (its tasks)
    from plane import tasks as sweeper
    from services.protection.tests.helpers import WorkerProcess

    settings.STRATA_JOB_STALE_RUNNING = 3
    jobs = {}
    for name, devices, mib in (("p1", ["image:300M", "image:300M"], 32),
                               ("p2", ["image:128M"], 1)):
        r = api.post("/api/v1/pools/", {"name": name, "driver": "local", "devices": devices,
                                        "redundancy": "mirror" if len(devices) > 1 else "none"},
                     format="json")
        assert r.status_code == 201, r.json()
        fs = api.post("/api/v1/filesystems/", {"name": f"{name}fs", "pool": name},
                      format="json").json()
        with open(os.path.join(fs["path"], "data"), "wb") as f:
            f.write(os.urandom(mib << 20))
            os.fsync(f.fileno())
    app.control.purge()
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"scrub": 2}}, format="json")
    assert r.status_code == 200, r.json()
    for name in ("p1", "p2"):
        jobs[name] = api.post(f"/api/v1/pools/{name}/scrub/").json()["id"]
    env = {"STRATA_JOB_HEARTBEAT": "0.5", "STRATA_TASK_VISIBILITY_TIMEOUT": "5"}
    for node in ("n1", "n2"):
        (tmp_path / node).mkdir()
    n1 = WorkerProcess(data_dir, tmp_path / "n1", pool="prefork", prefetch=2,
                       extra_env={**env, "STRATA_NODE_NAME": "n1"})
    n2 = None
    try:
        wait_for(lambda: (Job.objects.get(pk=jobs["p1"]).bytes_done or 0) > 0, 60,
                 "n1 to run the first scrub")
        assert Job.objects.get(pk=jobs["p2"]).state == "pending"
        wait_for(lambda: not _queued(app), 30, "n1 to take the second message")
        n1.kill9(children=True)
        assert {jobs["p1"], jobs["p2"]} <= sweeper.queued_job_ids()   # held, unacknowledged
        r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
        assert r.status_code == 200, r.json()
        n2 = WorkerProcess(data_dir, tmp_path / "n2", pool="prefork",
                           extra_env={**env, "STRATA_NODE_NAME": "n2"})
        job = wait_job(api, jobs["p2"], timeout=120)   # no sweeper: the message came back
        assert job["state"] == "succeeded", job
        assert job["node"] == "n2" and job["result"]["errors_uncorrectable"] == 0
        assert Job.objects.get(pk=jobs["p1"]).state == "running"   # n1's: the sweeper's
        swept = wait_for(lambda: sweeper.sweep_jobs()["running"]["rerun"], 30,
                         "the sweeper to see n1's heartbeat stop", interval=0.5)
        assert swept == [jobs["p1"]]
        job = wait_job(api, jobs["p1"], timeout=120)
        assert job["state"] == "succeeded" and job["node"] == "n2", job
        assert job["result"]["bytes_scrubbed"] > 32 << 20
    finally:
        n1.kill9(children=True)
        if n2:
            n2.kill9(children=True)


def _queued(app) -> list:
    """The messages waiting in the default queue (not those a worker took)."""
    with app.connection_for_read() as conn:
        return conn.default_channel.client.lrange(app.conf.task_default_queue, 0, -1)


def test_sweeper_fails_a_cut_off_job_that_is_not_idempotent(transactional_db, settings):
    """The worker's death stands in as a heartbeat a minute old (the kill itself: above)."""
    from datetime import timedelta

    import services.tiering.tasks  # noqa: F401
    from django.utils import timezone

    from plane import tasks as sweeper

    settings.STRATA_JOB_STALE_RUNNING = 60
    old = timezone.now() - timedelta(seconds=90)
    cut = Job.objects.create(kind="tier-move", task="tiering.move_job", state="running",
                             started_at=old, heartbeat_at=old, node="n2")
    fresh = Job.objects.create(kind="tier-move", task="tiering.move_job", state="running",
                               started_at=old, heartbeat_at=timezone.now())
    assert sweeper.sweep_jobs()["running"] == {"rerun": [], "failed": [cut.pk]}
    cut.refresh_from_db()
    assert cut.state == "failed" and cut.finished_at is not None
    assert "no heartbeat for 90 s on node n2" in cut.error and "start it again" in cut.error
    fresh.refresh_from_db()
    assert fresh.state == "running"


def test_a_run_declared_dead_stops_at_its_next_report_and_writes_nothing(transactional_db):
    """A worker that was only slow (its heartbeat late past the limit) finds its job settled
    by the sweeper: it must not overwrite the row (nor the rerun's) and stops."""
    from django.utils import timezone

    from plane.jobs import JobCancelled, JobContext, settle_interrupted

    job = Job.objects.create(kind="tier-move", task="tiering.move_job", state="running",
                             started_at=timezone.now(), heartbeat_at=timezone.now())
    ctx = JobContext(Job.objects.get(pk=job.pk))
    assert not ctx.should_cancel()
    assert settle_interrupted(job, "no heartbeat") == "failed"   # what the sweeper does
    assert ctx.should_cancel()
    with pytest.raises(JobCancelled):
        ctx.progress(100, "done")
    assert not ctx.this_run().update(state="succeeded")
    job.refresh_from_db()
    assert job.state == "failed" and job.progress == 0 and job.error.startswith("interrupted")


def test_a_message_arriving_during_the_clean_up_of_a_rerun_runs_nothing(transactional_db,
                                                                        monkeypatch):
    """The sweeper's rerun of a cut-off job: while its kind's clean-up runs (stopping what the
    dead run left going), a message of the job that arrives (the dead worker's own, handed out
    again after the visibility timeout) must not start a run the clean-up would cut, and a
    poller must not read a final state; only after the clean-up is the job pending and queued.
    (The queueing itself is recorded, not sent: the end-to-end case is the test above.)"""
    from django.utils import timezone

    from plane import jobs

    ran, seen, queued = [], [], []

    @jobs.job_task("tests.rerun_probe", idempotent=True)
    def probe(ctx):
        ran.append(ctx.job.pk)
        return {}

    def cleanup(**_):
        probe(job.pk)                                   # the message handed out again
        seen.append(Job.objects.get(pk=job.pk).state)   # what a poller reads meanwhile

    monkeypatch.setitem(jobs._ON_INTERRUPTED, "rerun-probe", cleanup)
    monkeypatch.setattr(jobs, "requeue", lambda j: queued.append(j.pk))
    old = timezone.now()
    job = Job.objects.create(kind="rerun-probe", task="tests.rerun_probe", state="running",
                             started_at=old, heartbeat_at=old)
    dead_run = jobs.JobContext(Job.objects.get(pk=job.pk))
    assert jobs.settle_interrupted(job, "no heartbeat") == "rerun"
    assert ran == [] and seen == ["running"] and queued == [job.pk]
    assert dead_run.should_cancel()           # the dead run owns the row no more
    job.refresh_from_db()
    assert job.state == "pending" and job.started_at is None and job.heartbeat_at is None
    assert job.message == "queued again: no heartbeat"
    probe(job.pk)                             # the queued message: the rerun itself
    job.refresh_from_db()
    assert ran == [job.pk] and job.state == "succeeded"
