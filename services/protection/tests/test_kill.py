"""A worker killed with SIGKILL mid-backup and mid-replication: the source stays
readable, nothing half-made is visible (no restore point, no replica snapshot), and the
next run (on another worker, once the dead run's lock expired) completes: the backup's
orphan chunks are removed, the replication resumes, and the bytes match by hash."""
import os
import time
import urllib.parse

import pytest
from celery.contrib.testing.worker import start_worker

from plane.celery import app
from plane.models import Job
from services.protection.models import RestorePoint
from services.protection.tests.helpers import (
    CutProxy,
    WorkerProcess,
    file_hashes,
    write_files,
)
from services.protection.tests.s3gateway import ACCESS, SECRET, S3Gateway
from services.storage.models import FileSystem
from tests.kit import run_job, wait_for

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


def _big_fs(api, pool="p1", size="300M", mib=40):
    r = api.post("/api/v1/pools/", {"name": pool, "driver": "local",
                                    "devices": [f"image:{size}"]}, format="json")
    assert r.status_code == 201, r.json()
    path = api.post("/api/v1/filesystems/", {"name": "big", "pool": pool},
                    format="json").json()["path"]
    write_files(path, {f"shard-{i}": os.urandom(8 * MiB) for i in range(mib // 8)})
    return path


def _kill_when(api, url, data_dir, tmp_path, started):
    """Start a job on a subprocess worker and SIGKILL it once ``started(job)`` holds. The
    background I/O budget (8 MiB/s) keeps the run going long enough to be caught mid-way."""
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"backup": 8, "replication": 8}},
                format="json")
    assert r.status_code == 200, r.json()
    app.control.purge()
    proc = WorkerProcess(data_dir, tmp_path, lock_ttl=2)
    try:
        r = api.post(url, {}, format="json")
        assert r.status_code == 202, r.json()
        job_id = r.json()["id"]
        wait_for(lambda: started(Job.objects.get(pk=job_id)), 120, "the job to get going")
    finally:
        proc.kill9()
    time.sleep(2.5)  # the dead run's lock expires (STRATA_PROTECTION_LOCK_TTL=2 there)
    return job_id


def test_kill9_mid_backup_then_backup_again(api, data_dir, tmp_path, gateway_factory):
    gw = gateway_factory()
    src = _big_fs(api)
    before = file_hashes(src)
    assert api.post("/api/v1/backup-targets/", {
        "name": "s3", "endpoint_url": gw.endpoint, "access_key": ACCESS, "secret_key": SECRET,
        "bucket": "backups"}, format="json").status_code == 201
    assert api.post("/api/v1/backups/", {"name": "big-s3", "filesystem": "big",
                                         "target": "s3"}, format="json").status_code == 201

    _kill_when(api, "/api/v1/backups/big-s3/run/", data_dir, tmp_path,
               lambda job: "bytes backed up" in job.message
               and int(job.message.split()[0]) >= 8 * MiB)
    assert file_hashes(src) == before  # the source is untouched and readable
    assert not RestorePoint.objects.exists()
    s3 = gw.client()
    orphans = [o["Key"] for o in s3.list_objects_v2(Bucket="backups").get("Contents", [])]
    assert orphans and not any(k.endswith("manifest.json") for k in orphans)

    api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        job = run_job(api, "/api/v1/backups/big-s3/run/", timeout=180)
        assert job["state"] == "succeeded" and job["result"]["full"], job
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="backups")["Contents"]]
        assert not set(orphans) & set(keys)  # the dead run's uploads are gone
        rp = RestorePoint.objects.get()
        job = run_job(api, f"/api/v1/restore-points/{rp.pk}/restore/", {"name": "big-r"},
                      timeout=180)
        assert job["state"] == "succeeded", job
    assert file_hashes(FileSystem.objects.get(name="big-r").path) == before


def test_kill9_mid_replication_then_resume(api, data_dir, tmp_path, live_server):
    u = urllib.parse.urlparse(live_server.url)
    proxy = CutProxy(u.hostname, u.port)
    try:
        src = _big_fs(api, "site-a")
        r = api.post("/api/v1/pools/", {"name": "site-b", "driver": "local",
                                        "devices": ["image:400M"]}, format="json")
        assert r.status_code == 201, r.json()
        before = file_hashes(src)
        token = api.token
        assert api.post("/api/v1/replication-peers/", {"name": "b", "url": proxy.url,
                                                       "token": token},
                        format="json").status_code == 201
        assert api.post("/api/v1/replications/", {
            "name": "big-dr", "filesystem": "big", "peer": "b", "target_pool": "site-b",
            "target_name": "big-replica"}, format="json").status_code == 201

        _kill_when(api, "/api/v1/replications/big-dr/sync/", data_dir, tmp_path,
                   lambda job: "bytes sent" in job.message
                   and int(job.message.split()[0]) >= 8 * MiB)
        assert file_hashes(src) == before
        assert not FileSystem.objects.filter(name="big-replica").exists()

        api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
            job = run_job(api, "/api/v1/replications/big-dr/sync/", timeout=180)
        assert job["state"] == "succeeded", job
        assert job["result"]["resumed_at"] >= 8 * MiB
        snap = job["result"]["snapshot"]
        replica = FileSystem.objects.get(name="big-replica")
        assert file_hashes(os.path.join(replica.path, ".snapshots", snap)) == before
    finally:
        proxy.close()


@pytest.fixture
def gateway_factory(tmp_path):
    made = []

    def make():
        gw = S3Gateway(str(tmp_path)).start()
        made.append(gw)
        gw.client().create_bucket(Bucket="backups")
        return gw
    yield make
    for gw in made:
        gw.stop()
