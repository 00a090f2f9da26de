"""Buckets in data protection, on the plane's own S3 gateway (started as `strata up` starts
it) with a real Celery worker, checked with boto3 by SHA-256: a schedule of a bucket takes
snapshots and prunes them by retention, a held version survives DeleteObject(versionId), a
snapshot restores into a new bucket with the old bytes; bucket replication to a second
gateway copies new versions with their metadata and deletes, and a run cut off mid-way is
resumed by the next without a half-written object on the target."""
import datetime
import hashlib
import json
import os
import time
import types
from unittest import mock

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError
from celery.contrib.testing.worker import start_worker
from django_celery_beat.models import PeriodicTask

from plane.celery import app
from plane.models import Job
from services.object.tests.planefixture import plane  # noqa: F401 (plane: a fixture)
from services.protection import bucket_replication, tasks
from services.protection.api import views
from services.protection.health import service_alerts
from services.protection.models import BucketReplication, SnapshotSchedule
from services.protection.tests.helpers import CutProxy, WorkerProcess
from services.protection.tests.s3gateway import ACCESS, SECRET, S3Gateway
from tests.kit import run_job, wait_for, wait_job

pytestmark = pytest.mark.django_db(transaction=True)
KiB, MiB = 1 << 10, 1 << 20


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def body(s3, bucket, key, version=None) -> bytes:
    kw = {"VersionId": version} if version else {}
    return s3.get_object(Bucket=bucket, Key=key, **kw)["Body"].read()


@pytest.fixture
def peer(tmp_path):
    gw = S3Gateway(str(tmp_path)).start()
    try:
        s3 = gw.client()
        s3.create_bucket(Bucket="replica")
        s3.put_bucket_versioning(Bucket="replica", VersioningConfiguration={"Status": "Enabled"})
        yield gw
    finally:
        gw.stop()


def test_bucket_schedule_snapshots_prune_hold_and_restore(api, worker, plane, client):
    s3 = plane.admin_s3
    assert api.post("/api/v1/buckets/", {"name": "models"}, format="json").status_code == 201
    sched = {"name": "models-often", "bucket": "models", "every_minutes": 60, "keep_last": 2}

    r = api.post("/api/v1/snapshot-schedules/", {**sched, "bucket": "no-such"}, format="json")
    assert r.status_code == 400 and "no bucket no-such" in r.json()["detail"], r.json()
    r = api.post("/api/v1/snapshot-schedules/", sched, format="json")
    assert r.status_code == 409 and "enable versioning" in r.json()["detail"], r.json()
    r = api.post("/api/v1/bucket-snapshots/", {"bucket": "models"}, format="json")
    assert r.status_code == 409, r.json()
    r = api.post("/api/v1/bucket-snapshots/", {"bucket": "no-such"}, format="json")
    assert r.status_code == 400 and "no bucket no-such" in r.json()["detail"], r.json()
    assert api.patch("/api/v1/buckets/models/", {"versioning": "Enabled"},
                     format="json").status_code == 200
    r = api.post("/api/v1/snapshot-schedules/", sched, format="json")
    assert r.status_code == 201 and r.json()["bucket"] == "models", r.json()

    # three generations of the bucket, a scheduled snapshot after each
    generations, snaps = [], []
    for gen in range(3):
        data = {f"ckpt/shard-{i}": os.urandom(50 * KiB + gen) for i in range(3)}
        data["big"] = os.urandom(300 * KiB)
        vids = {k: s3.put_object(Bucket="models", Key=k, Body=v)["VersionId"]
                for k, v in data.items()}
        generations.append((data, vids))
        if gen == 2:  # the last run comes the way beat sends it
            tasks.run_schedule(SnapshotSchedule.objects.get(name="models-often").pk)
            job = wait_job(api, wait_for(lambda: api.get(
                "/api/v1/jobs/?kind=snapshot-schedule").json()["results"][0]["id"]
                if len(api.get("/api/v1/jobs/?kind=snapshot-schedule").json()["results"]) == 3
                else None, what="the beat-sent run"))
        else:
            job = run_job(api, "/api/v1/snapshot-schedules/models-often/run/")
        assert job["state"] == "succeeded", job
        assert job["result"]["objects"] == 4
        snaps.append(job["result"]["snapshot"])
    assert job["result"]["pruned"] == [snaps[0]] and job["result"]["kept"] == snaps[1:]
    listed = api.get("/api/v1/bucket-snapshots/?bucket=models").json()["results"]
    assert [s["name"] for s in listed] == snaps[1:] and listed[0]["objects"] == 4
    assert api.get("/api/v1/snapshot-schedules/models-often/").json()["last_snapshot"] == snaps[2]

    # the pruned snapshot held generation 0: its versions can go; generation 1 is held
    s3.delete_object(Bucket="models", Key="big", VersionId=generations[0][1]["big"])
    with pytest.raises(ClientError) as err:
        s3.delete_object(Bucket="models", Key="big", VersionId=generations[1][1]["big"])
    assert err.value.response["Error"]["Code"] == "AccessDenied"
    assert f"held by snapshot {snaps[1]}" in err.value.response["Error"]["Message"]
    s3.delete_object(Bucket="models", Key="ckpt/shard-0")  # a plain delete: a marker
    r = api.patch("/api/v1/buckets/models/", {"versioning": "Suspended"}, format="json")
    assert r.status_code == 409 and "has snapshots" in r.json()["detail"], r.json()
    assert sha(body(s3, "models", "big", generations[1][1]["big"])) == sha(
        generations[1][0]["big"])

    # restore generation 1 into a new bucket
    one = f"models/{snaps[1]}"
    r = api.post(f"/api/v1/bucket-snapshots/{one}/restore/", {"bucket": "models"},
                 format="json")
    assert r.status_code == 400, r.json()
    assert api.post("/api/v1/buckets/", {"name": "taken"}, format="json").status_code == 201
    r = api.post(f"/api/v1/bucket-snapshots/{one}/restore/", {"bucket": "taken"},
                 format="json")
    assert r.status_code == 409 and "already exists" in r.json()["detail"], r.json()
    r = api.post("/api/v1/bucket-snapshots/models/nope/restore/", {"bucket": "x-new"},
                 format="json")
    assert r.status_code == 404, r.json()
    job = run_job(api, f"/api/v1/bucket-snapshots/{one}/restore/", {"bucket": "models-gen1"})
    assert job["state"] == "succeeded", job
    assert job["result"]["copied"] == 4 and job["progress"] == 100
    assert job["bytes_done"] == job["bytes_total"] == job["result"]["bytes"] > 0, job
    restored = {o["Key"] for o in s3.list_objects_v2(Bucket="models-gen1")["Contents"]}
    assert restored == set(generations[1][0])
    for key, data in generations[1][0].items():
        assert sha(body(s3, "models-gen1", key)) == sha(data)
    assert api.get("/api/v1/buckets/models-gen1/").json()["used_objects"] == 4

    # snapshots are taken and deleted by hand too; the versions are then free
    r = api.post("/api/v1/bucket-snapshots/", {"bucket": "models", "name": "by-hand"},
                 format="json")
    assert r.status_code == 201 and r.json()["id"] == "models/by-hand", r.json()
    assert api.get("/api/v1/bucket-snapshots/models/by-hand/").json()["objects"] == 3
    client.force_login(api.user)  # the console pages show them
    page = client.get("/console/bucket-snapshots/").content.decode()
    assert snaps[1] in page and "by-hand" in page and 'data-key="models/by-hand"' in page
    assert "bucket models" in client.get("/console/snapshot-schedules/").content.decode()
    assert api.delete(f"/api/v1/bucket-snapshots/{one}/").status_code == 204
    assert api.delete("/api/v1/bucket-snapshots/models/by-hand/").status_code == 204
    assert api.get("/api/v1/bucket-snapshots/models/by-hand/").status_code == 404
    # unnamed ones are named by the time; two in one second both get made
    frozen = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.timezone.utc)
    with mock.patch.object(views, "timezone", types.SimpleNamespace(now=lambda: frozen)):
        quick = [api.post("/api/v1/bucket-snapshots/", {"bucket": "models"}, format="json")
                 for _ in range(2)]
    assert [r.status_code for r in quick] == [201, 201], [r.json() for r in quick]
    assert [r.json()["name"] for r in quick] == ["manual-20261130-120000",
                                                 "manual-20261130-120000-2"]
    for r in quick:
        assert api.delete(f"/api/v1/bucket-snapshots/{r.json()['id']}/").status_code == 204
    s3.delete_object(Bucket="models", Key="big", VersionId=generations[1][1]["big"])

    # deleting the bucket takes its schedule (and beat entry) with it
    left = api.get("/api/v1/bucket-snapshots/?bucket=models").json()["results"]
    assert [x["name"] for x in left] == [snaps[2]]
    assert api.delete(f"/api/v1/bucket-snapshots/models/{snaps[2]}/").status_code == 204
    for v in s3.list_object_versions(Bucket="models").get("Versions", []) + \
            s3.list_object_versions(Bucket="models").get("DeleteMarkers", []):
        s3.delete_object(Bucket="models", Key=v["Key"], VersionId=v["VersionId"])
    assert api.delete("/api/v1/buckets/models/").status_code == 204
    assert not SnapshotSchedule.objects.exists()
    assert not PeriodicTask.objects.filter(name__startswith="protection:schedule:").exists()


def _target(api, url, **over):
    r = api.post("/api/v1/backup-targets/", {
        "name": "peer", "endpoint_url": url, "access_key": ACCESS, "secret_key": SECRET,
        "bucket": "replica", **over}, format="json")
    assert r.status_code == 201, r.json()


def test_bucket_replication_copies_versions_deletes_and_resumes(api, worker, plane, peer,
                                                               client, monkeypatch):
    monkeypatch.setattr(bucket_replication, "PAGE", 3)  # several pages of the change feed
    monkeypatch.setattr(bucket_replication, "TRANSFER", TransferConfig(  # multipart above 5 MiB
        multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, use_threads=False))
    src, dst = plane.admin_s3, peer.client()
    proxy = CutProxy("127.0.0.1", peer.port)
    try:
        _target(api, proxy.url)
        assert api.post("/api/v1/buckets/", {"name": "src"}, format="json").status_code == 201
        rep = {"name": "src-to-peer", "bucket": "src", "target": "peer", "every_minutes": 5}
        r = api.post("/api/v1/bucket-replications/", rep, format="json")
        assert r.status_code == 409 and "enable versioning" in r.json()["detail"], r.json()
        r = api.post("/api/v1/bucket-replications/", {**rep, "target": "nope"}, format="json")
        assert r.status_code == 400 and "target" in r.json()["fields"], r.json()
        api.patch("/api/v1/buckets/src/", {"versioning": "Enabled"}, format="json")
        r = api.post("/api/v1/bucket-replications/", rep, format="json")
        assert r.status_code == 201 and r.json()["lag_seconds"] is None, r.json()
        assert BucketReplication.objects.get().periodic_task.interval.every == 5

        first = {f"data/{i}": os.urandom(10 * KiB * (i + 1)) for i in range(4)}
        first["data/4"] = os.urandom(12 * MiB + 5)
        for key, data in first.items():
            src.put_object(Bucket="src", Key=key, Body=data, ContentType="application/x-ckpt",
                           Metadata={"step": key[-1]}, Tagging="team=ml")
        job = run_job(api, "/api/v1/bucket-replications/src-to-peer/sync/")
        assert job["state"] == "succeeded", job
        assert (job["result"]["versions"], job["result"]["deletes"]) == (5, 0)
        assert job["bytes_done"] == job["bytes_total"] == job["result"]["bytes"] > 0, job
        for key, data in first.items():
            got = dst.get_object(Bucket="replica", Key=key)
            assert sha(got["Body"].read()) == sha(data)
            assert got["ContentType"] == "application/x-ckpt"
            assert got["Metadata"] == {"step": key[-1]}
            tags = dst.get_object_tagging(Bucket="replica", Key=key)["TagSet"]
            assert tags == [{"Key": "team", "Value": "ml"}]

        # only what is new: an overwrite, a delete, a new key
        src.put_object(Bucket="src", Key="data/0", Body=b"second")
        src.delete_object(Bucket="src", Key="data/1")
        src.put_object(Bucket="src", Key="new", Body=b"n")
        job = run_job(api, "/api/v1/bucket-replications/src-to-peer/sync/")
        assert job["state"] == "succeeded", job
        assert (job["result"]["versions"], job["result"]["deletes"]) == (2, 1)
        assert body(dst, "replica", "data/0") == b"second"
        assert body(dst, "replica", "new") == b"n"
        with pytest.raises(ClientError) as err:
            dst.get_object(Bucket="replica", Key="data/1")
        assert err.value.response["Error"]["Code"] == "NoSuchKey"
        assert run_job(api, "/api/v1/bucket-replications/src-to-peer/sync/")["result"][
            "versions"] == 0
        shown = api.get("/api/v1/bucket-replications/src-to-peer/").json()
        assert shown["state"] == "ok" and shown["lag_seconds"] is not None

        # a link that drops mid-run: the run fails, the next resumes from the watermark
        batch = {f"batch/{i:02d}": os.urandom(256 * KiB) for i in range(12)}
        for key, data in batch.items():
            src.put_object(Bucket="src", Key=key, Body=data)
        before = BucketReplication.objects.get().watermark
        proxy.cut_after = 5 * 256 * KiB + 100 * KiB
        job = run_job(api, "/api/v1/bucket-replications/src-to-peer/sync/")
        assert job["state"] == "failed" and "resumes" in job["error"], job
        row = BucketReplication.objects.get()
        assert row.state == "error" and row.watermark > before
        assert any(a["text"].startswith("Bucket replication src-to-peer failed")
                   for a in service_alerts())  # on the dashboard
        there = {o["Key"] for o in dst.list_objects_v2(Bucket="replica", Prefix="batch/")
                 .get("Contents", [])}
        assert 0 < len(there) < len(batch)
        for key in there:  # never a half-written object
            assert sha(body(dst, "replica", key)) == sha(batch[key])
        proxy.cut_after = None
        job = run_job(api, "/api/v1/bucket-replications/src-to-peer/sync/")
        assert job["state"] == "succeeded", job
        assert job["result"]["versions"] <= len(batch) - len(there) + bucket_replication.PARALLEL
        for key, data in batch.items():
            assert sha(body(dst, "replica", key)) == sha(data)
        versions = dst.list_object_versions(Bucket="replica", Prefix="batch/")["Versions"]
        assert len(versions) <= len(batch) + bucket_replication.PARALLEL  # in flight, twice

        client.force_login(api.user)
        page = client.get("/console/bucket-replications/").content.decode()
        assert "src-to-peer" in page and "peer" in page
        # the target cannot go while a replication uses it
        assert api.delete("/api/v1/backup-targets/peer/").status_code == 409
        assert api.delete("/api/v1/bucket-replications/src-to-peer/").status_code == 204
        assert api.delete("/api/v1/backup-targets/peer/").status_code == 204
    finally:
        proxy.close()


def test_kill9_mid_bucket_replication_then_resume(api, data_dir, tmp_path, plane, peer,
                                                  settings, monkeypatch):
    src, dst = plane.admin_s3, peer.client()
    _target(api, peer.endpoint)
    api.post("/api/v1/buckets/", {"name": "big", "versioning": "Enabled"}, format="json")
    data = {f"shard-{i:02d}": os.urandom(MiB) for i in range(16)}
    for key, value in data.items():
        src.put_object(Bucket="big", Key=key, Body=value)
    assert api.post("/api/v1/bucket-replications/", {"name": "big-dr", "bucket": "big",
                                                     "target": "peer"},
                    format="json").status_code == 201

    # a subprocess worker, throttled to 4 MiB/s by the I/O budget, killed a few objects in
    monkeypatch.setenv("STRATA_SERVICE_OPTIONS", json.dumps(settings.SERVICE_OPTIONS))
    monkeypatch.setenv("STRATA_SECRET_KEY", settings.SECRET_KEY)
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"replication": 4}},
                format="json")
    assert r.status_code == 200, r.json()
    app.control.purge()
    proc = WorkerProcess(data_dir, tmp_path, lock_ttl=2)
    try:
        r = api.post("/api/v1/bucket-replications/big-dr/sync/", {}, format="json")
        assert r.status_code == 202, r.json()
        job_id = r.json()["id"]
        wait_for(lambda: Job.objects.get(pk=job_id).message.split()[0:1] in (
            ["3"], ["4"], ["5"], ["6"]), 120, "a few objects copied")
    finally:
        proc.kill9()
    time.sleep(2.5)  # the dead run's lock expires
    row = BucketReplication.objects.get()
    assert row.watermark > 0
    there = {o["Key"] for o in dst.list_objects_v2(Bucket="replica").get("Contents", [])}
    assert 3 <= len(there) < len(data)
    for key in there:  # never a half-written object
        assert sha(body(dst, "replica", key)) == sha(data[key])

    api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        job = run_job(api, "/api/v1/bucket-replications/big-dr/sync/")
    assert job["state"] == "succeeded", job
    assert job["result"]["versions"] <= len(data) - len(there) + bucket_replication.PARALLEL
    for key, value in data.items():
        assert sha(body(dst, "replica", key)) == sha(value)
    assert len(dst.list_object_versions(Bucket="replica")["Versions"]) <= (
        len(data) + bucket_replication.PARALLEL)
