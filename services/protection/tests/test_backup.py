"""Backup to object storage, against a real Strata S3 gateway subprocess: a full then
incremental backups (one taken while a writer keeps writing), a catalog of restore points,
restores to new file systems and volumes equal to the source by hash, and a damaged chunk
that makes a restore fail without leaving anything behind; a full and an incremental each
run under a writer that appends, overwrites in place and creates files restore to exactly
the snapshot their run took."""
import os
import threading
import time
import zlib

import pytest

from services.protection.models import RestorePoint
from services.protection.tests.helpers import file_hashes, write_files
from services.protection.tests.s3gateway import ACCESS, SECRET, S3Gateway
from services.storage.drivers import driver_for
from services.storage.models import FileSystem, Volume
from tests.kit import run_job, wait_for, wait_job

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


@pytest.fixture
def gateway(tmp_path):
    gw = S3Gateway(str(tmp_path)).start()
    try:
        gw.client().create_bucket(Bucket="backups")
        yield gw
    finally:
        gw.stop()


def _target(api, gateway, **over):
    body = {"name": "s3", "endpoint_url": gateway.endpoint, "access_key": ACCESS,
            "secret_key": SECRET, "bucket": "backups", "prefix": "site-a", **over}
    return api.post("/api/v1/backup-targets/", body, format="json")


def test_backup_incremental_restore_by_hash(api, worker, gateway):
    r = api.post("/api/v1/pools/", {"name": "p1", "driver": "local",
                                    "devices": ["image:512M"]}, format="json")
    assert r.status_code == 201, r.json()
    src = api.post("/api/v1/filesystems/", {"name": "data", "pool": "p1"},
                   format="json").json()["path"]
    write_files(src, {f"shards/{i}": os.urandom(MiB) for i in range(8)})
    write_files(src, {"manifest.json": b'{"step": 1}', "empty": b""})
    os.symlink("shards/0", os.path.join(src, "latest"))

    r = _target(api, gateway, bucket="no-such-bucket")
    assert r.status_code == 400 and "no-such-bucket" in r.json()["detail"], r.json()
    r = _target(api, gateway)
    assert r.status_code == 201 and "secret_key" not in r.json(), r.json()
    r = api.post("/api/v1/backups/", {"name": "data-s3", "filesystem": "data", "target": "s3"},
                 format="json")
    assert r.status_code == 201, r.json()

    # full
    job = run_job(api, "/api/v1/backups/data-s3/run/")
    assert job["state"] == "succeeded", job
    full = job["result"]
    assert full["full"] and full["stream_bytes"] > 8 * MiB and full["chunks"] >= 2
    assert job["bytes_done"] == job["bytes_total"] == full["stream_bytes"], job
    at_full = file_hashes(src)

    # incremental after changing about 1%
    write_files(src, {"manifest.json": b'{"step": 2}', "shards/3": os.urandom(MiB // 8)})
    job = run_job(api, "/api/v1/backups/data-s3/run/")
    assert job["state"] == "succeeded", job
    incr = job["result"]
    assert not incr["full"] and incr["stream_bytes"] < MiB
    at_incr = file_hashes(src)

    # incremental taken while a writer keeps writing
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            write_files(src, {f"live/{i % 20}": os.urandom(64 << 10)})
            i += 1
    t = threading.Thread(target=writer)
    t.start()
    try:
        job = run_job(api, "/api/v1/backups/data-s3/run/")
    finally:
        stop.set()
        t.join()
    assert job["state"] == "succeeded", job
    busy = job["result"]
    at_busy = file_hashes(os.path.join(src, ".snapshots", busy["snapshot"]))

    # the catalog
    points = api.get("/api/v1/restore-points/?backup=data-s3").json()["results"]
    assert [p["snapshot"] for p in points] == [busy["snapshot"], incr["snapshot"],
                                               full["snapshot"]]
    assert [p["full"] for p in points] == [False, False, True]
    assert points[0]["parent"] == incr["snapshot"] and points[1]["parent"] == full["snapshot"]
    keys = {o["Key"] for o in gateway.client().list_objects_v2(
        Bucket="backups", Prefix="site-a/data-s3/")["Contents"]}
    assert {p["key"] for p in points} <= keys
    assert all(p["stored_bytes"] > 0 for p in points)
    # only the newest backed-up snapshot stays on the source (the next increment's base)
    assert [s.name for s in FileSystem.objects.get(name="data").snapshots.all()] == [
        busy["snapshot"]]

    # restores: each equals the source at its time, by hash
    for point, expected, name in ((points[1], at_incr, "data-r2"), (points[2], at_full,
                                                                     "data-r1"),
                                  (points[0], at_busy, "data-r3")):
        job = run_job(api, f"/api/v1/restore-points/{point['id']}/restore/", {"name": name})
        assert job["state"] == "succeeded", job
        chain = sum(p["stream_bytes"] for p in points if p["snapshot"] in (
            point["snapshot"], point["parent"], full["snapshot"]))
        assert job["bytes_done"] == job["bytes_total"] == chain, job  # the chain it read
        restored = FileSystem.objects.get(name=name)
        assert restored.pool.name == "p1"
        assert file_hashes(restored.path) == expected
        assert os.readlink(os.path.join(restored.path, "latest")) == "shards/0"
    write_files(FileSystem.objects.get(name="data-r3").path, {"writable": b"yes"})

    # a restore point that increments build on cannot be deleted
    r = api.delete(f"/api/v1/restore-points/{points[1]['id']}/")
    assert r.status_code == 409, r.json()

    # a damaged chunk: the restore fails and leaves nothing behind
    rp = RestorePoint.objects.get(pk=points[2]["id"])
    s3 = gateway.client()
    s3.put_object(Bucket="backups", Key=f"{rp.key.rsplit('/', 1)[0]}/chunk-000001",
                  Body=zlib.compress(os.urandom(MiB)))
    before = set(driver_for("local").list_filesystems("p1"))
    job = run_job(api, f"/api/v1/restore-points/{points[0]['id']}/restore/", {"name": "bad"})
    assert job["state"] == "failed" and "checksum" in job["error"], job
    assert not FileSystem.objects.filter(name="bad").exists()
    assert set(driver_for("local").list_filesystems("p1")) == before


def test_volume_backup_and_restore(api, worker, gateway):
    api.post("/api/v1/pools/", {"name": "p1", "driver": "local", "devices": ["image:400M"]},
             format="json")
    vol = api.post("/api/v1/volumes/", {"name": "vm", "pool": "p1", "size_bytes": 64 * MiB},
                   format="json").json()
    with open(vol["path"], "r+b") as fh:
        fh.seek(5 * MiB)
        fh.write(os.urandom(3 * MiB))
    assert _target(api, gateway).status_code == 201
    r = api.post("/api/v1/backups/", {"name": "vm-s3", "volume": "vm", "target": "s3"},
                 format="json")
    assert r.status_code == 201, r.json()
    assert run_job(api, "/api/v1/backups/vm-s3/run/")["state"] == "succeeded"
    with open(vol["path"], "r+b") as fh:
        fh.seek(40 * MiB)
        fh.write(b"x" * 4096)
    job = run_job(api, "/api/v1/backups/vm-s3/run/")
    assert job["state"] == "succeeded" and not job["result"]["full"], job
    rp = RestorePoint.objects.get(backup__name="vm-s3", snapshot=job["result"]["snapshot"])
    job = run_job(api, f"/api/v1/restore-points/{rp.pk}/restore/", {"name": "vm-r"})
    assert job["state"] == "succeeded", job
    restored = Volume.objects.get(name="vm-r")
    assert restored.size_bytes == 64 * MiB
    assert file_hashes(os.path.dirname(restored.path))[os.path.basename(restored.path)] == \
        file_hashes(os.path.dirname(vol["path"]))[os.path.basename(vol["path"])]

    # the catalog outlives its source: delete the volume, then restore again
    assert api.delete("/api/v1/volumes/vm/").status_code == 204
    backup = api.get("/api/v1/backups/vm-s3/").json()
    assert backup["volume"] is None and backup["source_name"] == "vm"
    r = api.post(f"/api/v1/restore-points/{rp.pk}/restore/", {"name": "vm-r2"}, format="json")
    assert r.status_code == 400 and "pool" in r.json()["detail"], r.json()
    job = run_job(api, f"/api/v1/restore-points/{rp.pk}/restore/", {"name": "vm-r2",
                                                                    "pool": "p1"})
    assert job["state"] == "succeeded", job
    with open(Volume.objects.get(name="vm-r2").path, "rb") as a, open(restored.path, "rb") as b:
        assert a.read() == b.read()
    job = run_job(api, "/api/v1/backups/vm-s3/run/")
    assert job["state"] == "failed" and "was deleted" in job["error"], job


def test_cancel_a_throttled_backup_leaves_nothing_behind(api, worker, gateway):
    """The backup draws from the shared I/O budget (here 4 MiB/s for the backup class), so
    it is still running when cancelled; a cancelled run leaves no restore point, no objects
    and no snapshot, and the source is untouched."""
    api.post("/api/v1/pools/", {"name": "p1", "driver": "local", "devices": ["image:400M"]},
             format="json")
    src = api.post("/api/v1/filesystems/", {"name": "data", "pool": "p1"},
                   format="json").json()["path"]
    write_files(src, {f"shard-{i}": os.urandom(4 * MiB) for i in range(5)})
    before = file_hashes(src)
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"backup": 4}}, format="json")
    assert r.status_code == 200, r.json()
    assert _target(api, gateway).status_code == 201
    api.post("/api/v1/backups/", {"name": "slow", "filesystem": "data", "target": "s3"},
             format="json")
    job_id = api.post("/api/v1/backups/slow/run/", {}, format="json").json()["id"]
    running = wait_for(lambda: (lambda j: j["bytes_done"] and j)(
        api.get(f"/api/v1/jobs/{job_id}/").json()), 60, "the backup to start sending")
    assert "bytes backed up" in running["message"], running
    assert running["bytes_total"] >= running["bytes_done"] > 0, running
    assert running["rate_bytes_per_s"] > 0 and running["eta_seconds"] is not None, running
    assert api.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200
    job = wait_job(api, job_id)
    assert job["state"] == "cancelled", job
    assert not RestorePoint.objects.exists()
    assert gateway.client().list_objects_v2(Bucket="backups").get("KeyCount", 0) == 0
    assert FileSystem.objects.get(name="data").snapshots.count() == 0
    assert file_hashes(src) == before


class _Writer(threading.Thread):
    """Keeps writing into ``root`` until stopped: appends to a log (truncated now and
    then), overwrites 64 KiB ranges of existing files in place, and makes and replaces
    small files, a few hundred times a second; ``ops`` counts what it did."""

    def __init__(self, root, files):
        super().__init__(daemon=True)
        self.root, self.files, self.ops = root, files, 0
        self.stop = threading.Event()

    def run(self):
        log = os.path.join(self.root, "log")
        while not self.stop.is_set():
            i = self.ops
            with open(log, "ab") as fh:
                fh.write(os.urandom(16 << 10))
            if os.path.getsize(log) > 4 * MiB:
                os.truncate(log, 0)
            with open(os.path.join(self.root, self.files[i % len(self.files)]), "r+b") as fh:
                fh.seek((i * 7919 % 30) * (64 << 10))
                fh.write(os.urandom(64 << 10))
            write_files(self.root, {f"new/{i % 40}": os.urandom(4096 + i % 5000)})
            self.ops += 1
            time.sleep(0.003)

    def __enter__(self):
        self.start()
        wait_for(lambda: self.ops > 20, 30, "the writer to get going")
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join()


def test_backups_taken_while_writing_restore_their_snapshot(api, worker, gateway):
    """A full backup run while a writer appends to, overwrites in place and creates files
    restores to exactly the snapshot the run took (not to the live tree, which moved on);
    an incremental after more writes, again under the writer, restores to its own."""
    api.post("/api/v1/pools/", {"name": "p1", "driver": "local", "devices": ["image:512M"]},
             format="json")
    src = api.post("/api/v1/filesystems/", {"name": "busy", "pool": "p1"},
                   format="json").json()["path"]
    files = [f"data/{i}" for i in range(6)]
    write_files(src, {f: os.urandom(2 * MiB) for f in files})
    assert _target(api, gateway).status_code == 201
    assert api.post("/api/v1/backups/", {"name": "busy-s3", "filesystem": "busy",
                                         "target": "s3"}, format="json").status_code == 201
    # 8 MiB/s for backups: the run lasts a couple of seconds, the writer busy all along
    assert api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"backup": 8}},
                   format="json").status_code == 200
    try:
        points = []
        with _Writer(src, files) as writer:
            for _ in ("full", "incremental"):
                ops = writer.ops
                job = run_job(api, "/api/v1/backups/busy-s3/run/")
                assert job["state"] == "succeeded", job
                assert writer.ops > ops + 20  # it kept writing through the run
                snap = os.path.join(src, ".snapshots", job["result"]["snapshot"])
                # the source's snapshot goes once the next increment is taken: hash it now
                points.append((job["result"], file_hashes(snap)))
                wait_for(lambda: file_hashes(src) != points[-1][1], 30,
                         "the live tree to move on from the snapshot")
    finally:
        api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
    (full, at_full), (incr, at_incr) = points
    assert full["full"] and not incr["full"] and at_full != at_incr
    assert "log" in at_full and "new/0" in at_full

    for result, expected, name in ((full, at_full, "busy-r1"), (incr, at_incr, "busy-r2")):
        rp = RestorePoint.objects.get(backup__name="busy-s3", snapshot=result["snapshot"])
        job = run_job(api, f"/api/v1/restore-points/{rp.pk}/restore/", {"name": name})
        assert job["state"] == "succeeded", job
        assert file_hashes(FileSystem.objects.get(name=name).path) == expected
