"""Snapshot schedules through the API: the beat entry follows the row, a run (sent the way
beat sends it, to a real worker) takes a snapshot and prunes by retention, and a snapshot
a clone depends on survives pruning."""
import json

import pytest
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from plane.models import Job
from services.protection.models import SnapshotSchedule
from services.protection.tests.helpers import WorkerProcess, write_files
from services.storage.models import Snapshot
from tests.kit import run_job, wait_for, wait_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def fs(api):
    r = api.post("/api/v1/pools/", {"name": "d1", "driver": "directory"}, format="json")
    assert r.status_code == 201, r.json()
    r = api.post("/api/v1/filesystems/", {"name": "ckpt", "pool": "d1"}, format="json")
    assert r.status_code == 201, r.json()
    return r.json()


def test_schedule_row_and_beat_entry_change_together(api, fs):
    r = api.post("/api/v1/snapshot-schedules/", {
        "name": "hourly", "filesystem": "ckpt", "cron": "5 * * * *", "keep_last": 3,
        "keep_daily": 7}, format="json")
    assert r.status_code == 201, r.json()
    sched = SnapshotSchedule.objects.get(name="hourly")
    pt = PeriodicTask.objects.get(pk=sched.periodic_task_id)
    assert pt.task == "protection.run_schedule" and json.loads(pt.args) == [sched.pk]
    assert (pt.crontab.minute, pt.crontab.hour, str(pt.crontab.timezone)) == ("5", "*", "UTC")
    assert pt.enabled and pt.interval is None

    r = api.patch("/api/v1/snapshot-schedules/hourly/", {"every_minutes": 15}, format="json")
    assert r.status_code == 200, r.json()
    assert r.json()["cron"] == "" and r.json()["every_minutes"] == 15
    pt.refresh_from_db()
    assert pt.crontab is None and (pt.interval.every, pt.interval.period) == (
        15, IntervalSchedule.MINUTES)

    r = api.patch("/api/v1/snapshot-schedules/hourly/", {"enabled": False}, format="json")
    pt.refresh_from_db()
    assert r.status_code == 200 and not pt.enabled

    assert api.delete("/api/v1/snapshot-schedules/hourly/").status_code == 204
    assert not PeriodicTask.objects.filter(pk=pt.pk).exists()
    assert CrontabSchedule.objects.exists()  # shared schedule rows may stay; tasks go


@pytest.mark.parametrize("body, word", [
    ({"cron": "5 * * *"}, "five"),
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "0 * * * *", "every_minutes": 5}, "exactly one"),
    ({}, "exactly one"),
    ({"every_minutes": 5, "keep_last": 0}, "retention"),
])
def test_bad_schedules_are_refused_with_a_reason(api, fs, body, word):
    payload = {"name": "s", "filesystem": "ckpt", "keep_last": 2, **body}
    r = api.post("/api/v1/snapshot-schedules/", payload, format="json")
    assert r.status_code == 400 and word in r.json()["detail"], r.json()
    assert not SnapshotSchedule.objects.exists() and not PeriodicTask.objects.filter(
        name__startswith="protection:").exists()


def test_bucket_schedules_need_the_object_service(api, fs):
    """(Bucket schedules on a running gateway: test_buckets.py.)"""
    r = api.post("/api/v1/snapshot-schedules/", {"name": "b", "bucket": "models",
                                                 "every_minutes": 5, "keep_last": 1},
                 format="json")
    assert r.status_code == 503 and "strata up" in r.json()["detail"], r.json()
    r = api.post("/api/v1/snapshot-schedules/", {"name": "b", "bucket": "Bad_Name",
                                                 "every_minutes": 5, "keep_last": 1},
                 format="json")
    assert r.status_code == 400 and "bucket" in r.json()["fields"], r.json()
    assert not SnapshotSchedule.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_runs_snapshot_and_prune_but_keep_what_a_clone_needs(api, fs, worker):
    r = api.post("/api/v1/snapshot-schedules/", {
        "name": "often", "filesystem": "ckpt", "every_minutes": 1, "keep_last": 2},
        format="json")
    assert r.status_code == 201, r.json()
    names = []
    for i in range(3):
        write_files(fs["path"], {"step": f"step {i}".encode()})
        job = run_job(api, "/api/v1/snapshot-schedules/often/run/")
        assert job["state"] == "succeeded", job
        names.append(job["result"]["snapshot"])
        assert names[-1].startswith("auto-often-")
    assert len(set(names)) == 3
    kept = set(Snapshot.objects.filter(filesystem__name="ckpt").values_list("name", flat=True))
    assert kept == set(names[1:])
    with open(f"{fs['path']}/.snapshots/{names[1]}/step", "rb") as fh:
        assert fh.read() == b"step 1"

    # a clone of the oldest kept snapshot protects it from the next prunes
    oldest = Snapshot.objects.get(filesystem__name="ckpt", name=names[1])
    r = api.post(f"/api/v1/snapshots/{oldest.pk}/clone/", {"name": "ckpt-debug"}, format="json")
    assert r.status_code == 201, r.json()

    # the next run is sent exactly as beat sends it: the PeriodicTask's task and args
    pt = PeriodicTask.objects.get(name="protection:schedule:often")
    worker.send_task(pt.task, args=json.loads(pt.args))
    wait_for(lambda: Job.objects.filter(kind="snapshot-schedule").count() >= 4, 30,
             "beat's task to start a job", interval=0.2)
    job = wait_job(api, Job.objects.filter(kind="snapshot-schedule").first().pk)
    assert job["state"] == "succeeded", job
    kept = set(Snapshot.objects.filter(filesystem__name="ckpt").values_list("name", flat=True))
    assert kept == {names[1], names[2], job["result"]["snapshot"]}
    sched = api.get("/api/v1/snapshot-schedules/often/").json()
    assert sched["last_snapshot"] == job["result"]["snapshot"] and sched["last_error"] == ""


@pytest.mark.django_db(transaction=True)
def test_celery_beat_runs_a_due_schedule_from_the_database(api, fs, worker, data_dir,
                                                           tmp_path):
    r = api.post("/api/v1/snapshot-schedules/", {
        "name": "beat", "filesystem": "ckpt", "every_minutes": 60, "keep_last": 5},
        format="json")
    assert r.status_code == 201, r.json()
    # make it due now: its last run was two hours ago
    from datetime import timedelta

    from django.utils import timezone
    PeriodicTask.objects.filter(name="protection:schedule:beat").update(
        last_run_at=timezone.now() - timedelta(hours=2))
    beat = WorkerProcess(data_dir, tmp_path, command="beat")
    try:
        job = wait_for(lambda: Job.objects.filter(kind="snapshot-schedule").first(), 60,
                       "celery beat to start the schedule's job")
    finally:
        beat.kill9()
    job = wait_job(api, job.pk)
    assert job["state"] == "succeeded", job
    assert Snapshot.objects.filter(filesystem__name="ckpt",
                                   name=job["result"]["snapshot"]).exists()


def test_deleting_the_file_system_removes_its_schedule_and_beat_entry(api, fs):
    r = api.post("/api/v1/snapshot-schedules/", {
        "name": "gone", "filesystem": "ckpt", "every_minutes": 10, "keep_last": 1},
        format="json")
    assert r.status_code == 201, r.json()
    assert PeriodicTask.objects.filter(name="protection:schedule:gone").exists()
    assert api.delete("/api/v1/filesystems/ckpt/").status_code == 204
    assert not SnapshotSchedule.objects.exists()
    assert not PeriodicTask.objects.filter(name="protection:schedule:gone").exists()
