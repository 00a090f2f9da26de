"""Tier-down of superseded versions to a job's capacity pool, on real file systems and a real
worker: only superseded, hot, unleased versions past `tier_after` move; every file of the
version (not only the manifest's) reaches the cold copy verified by sha256; the hot copy
goes only after the switch; a lease taken during the move keeps the hot copy; a hot copy
that no longer matches its manifest is not moved; pre-warm brings the version back."""
import hashlib
import os
from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from plane.celery import app as celery_app
from services.checkpoints import service, tasks, tierdown
from services.checkpoints.models import CheckpointVersion
from services.checkpoints.tests.conftest import begin, commit, save, write_shards
from tests.kit import wait_job

pytestmark = [pytest.mark.root]
MiB = 1 << 20


def make_tiered_job(api, name="llm", tier_after="00:00:01"):
    """Two directory pools (no loop devices): `flash` holds the job's file system, `cap`
    is its capacity pool."""
    for pool in ("flash", "cap"):
        r = api.post("/api/v1/pools/", {"name": pool, "driver": "directory"}, format="json")
        assert r.status_code == 201, r.json()
    r = api.post("/api/v1/filesystems/", {"name": "train", "pool": "flash"}, format="json")
    assert r.status_code == 201, r.json()
    r = api.post("/api/v1/checkpoint-jobs/", {
        "name": name, "filesystem": "train", "tier_after": tier_after, "capacity_pool": "cap",
        "keep_last": 10}, format="json")
    assert r.status_code == 201, r.json()
    return r.json()


def hashes(root: str) -> dict:
    out = {}
    for dirpath, _, files in os.walk(root):
        for fn in files:
            full = os.path.join(dirpath, fn)
            with open(full, "rb") as f:
                out[os.path.relpath(full, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def age(version_id: int, seconds: int = 60) -> None:
    """Pretend the version was superseded `seconds` ago."""
    CheckpointVersion.objects.filter(pk=version_id).update(
        superseded_at=timezone.now() - timedelta(seconds=seconds))


def test_tier_all_is_in_the_beat_schedule(transactional_db):  # beat closes its connections
    DatabaseScheduler(app=celery_app)  # what `celery beat` does at start
    task = PeriodicTask.objects.get(task="checkpoints.tier_all")
    assert task.enabled and task.interval.every == 60


def test_tiering_policy_is_checked(api):
    for pool in ("flash", "cap"):
        api.post("/api/v1/pools/", {"name": pool, "driver": "directory"}, format="json")
    api.post("/api/v1/filesystems/", {"name": "train", "pool": "flash"}, format="json")
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "a", "filesystem": "train",
                                              "tier_after": "01:00:00"}, format="json")
    assert r.status_code == 400 and "capacity_pool" in r.json()["fields"], r.json()
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "a", "filesystem": "train",
                                              "tier_after": "01:00:00",
                                              "capacity_pool": "flash"}, format="json")
    assert r.status_code == 400 and "already in pool flash" in str(r.json()), r.json()


def test_superseded_versions_move_cold_verified_and_prewarm_back(api, worker):
    make_tiered_job(api)
    # step 1: a manifest with sha256, plus a file the manifest does not list
    v1 = begin(api, "llm", 1)
    shards1 = {f"rank{i}.bin": os.urandom(2 * MiB + i) for i in range(3)}
    manifest = write_shards(v1, shards1)
    write_shards(v1, {"meta/notes.txt": b"written beside the shards"})
    assert commit(api, "llm", v1, manifest).status_code == 200
    before1 = hashes(v1["path"])
    # step 2: sizes only; step 3 is latest
    v2 = begin(api, "llm", 2)
    write_shards(v2, {"rank0.bin": os.urandom(MiB)})
    assert commit(api, "llm", v2, [{"name": "rank0.bin", "size": MiB}]).status_code == 200
    before2 = hashes(v2["path"])
    v3 = save(api, "llm", 3)

    # nothing is due before tier_after has passed since it was superseded
    assert list(tierdown.due(timezone.now() - timedelta(seconds=30))) == []
    age(v1["id"])
    age(v2["id"])
    # a leased version stays hot; the latest is never due
    r = api.post(f"/api/v1/checkpoint-jobs/llm/versions/{v2['id']}/lease/",
                 {"ttl_seconds": 600}, format="json")
    assert r.status_code == 201 and r.json()["prewarm_job"] is None
    lease2 = r.json()["id"]
    assert [v.pk for v in tierdown.due()] == [v1["id"]]

    started = tasks.tier_all()["jobs"]
    assert len(started) == 1
    assert tasks.tier_all()["jobs"] == []  # one move per version at a time
    job = wait_job(api, f"/api/v1/jobs/{started[0]}/")
    assert job["state"] == "succeeded", job
    assert job["result"]["copied_bytes"] == sum(map(len, shards1.values())) + 25
    assert job["bytes_done"] == job["bytes_total"] == job["result"]["copied_bytes"], job

    url1 = f"/api/v1/checkpoint-jobs/llm/versions/{v1['id']}/"
    assert api.get(url1).json()["tier"] == "cold"
    version = CheckpointVersion.objects.get(pk=v1["id"])
    cold = version.cold_path
    assert cold.endswith("/llm/step-1") and "ckpt-cold-cap" in cold
    assert not os.path.exists(v1["path"])  # the hot copy was released
    assert hashes(cold) == before1
    assert api.get(f"/api/v1/checkpoint-jobs/llm/versions/{v3['id']}/").json()["tier"] == "hot"

    # the cold file system cannot go while it holds the only copy
    r = api.delete(f"/api/v1/filesystems/{tierdown.cold_filesystem_name(version.job.capacity_pool)}/")
    assert r.status_code == 409 and "llm@1" in r.json()["detail"], r.json()

    # once its lease is released, step 2 (manifest without checksums) moves too, and its
    # manifest gains the sha256 of its shards
    assert api.delete(f"/api/v1/checkpoint-leases/{lease2}/").status_code == 204
    started = tasks.tier_all()["jobs"]
    assert wait_job(api, f"/api/v1/jobs/{started[0]}/")["state"] == "succeeded"
    v2row = CheckpointVersion.objects.get(pk=v2["id"])
    assert v2row.tier == "cold" and hashes(v2row.cold_path) == before2
    assert v2row.manifest == [{"name": "rank0.bin", "size": MiB,
                               "sha256": before2["rank0.bin"]}]

    # a lease on the cold version pre-warms every file back, verified
    r = api.post(f"{url1}lease/", {"ttl_seconds": 60}, format="json")
    assert r.status_code == 201 and r.json()["prewarm_job"], r.json()
    job = wait_job(api, r.json()["prewarm_job"])
    assert job["state"] == "succeeded", job
    assert api.get(url1).json()["tier"] == "hot"
    assert hashes(v1["path"]) == before1


def test_a_lease_taken_during_the_move_keeps_the_hot_copy(api):
    """The restore that leased the version mid-copy reads the hot copy, whole; the switch
    then refuses, removes its cold copy, and the next run moves the version."""
    make_tiered_job(api)
    v1 = save(api, "llm", 1, {f"rank{i}.bin": os.urandom(5 * MiB) for i in range(2)})
    save(api, "llm", 2)
    age(v1["id"])
    before = hashes(v1["path"])
    seen = {}

    def progress(pct, msg="", **counts):
        if not seen:  # the first chunk is copied: a restore starts now
            version = CheckpointVersion.objects.get(pk=v1["id"])
            seen["lease"], _ = service.take_lease(version, ttl_seconds=60)
            seen["read"] = hashes(version.path)

    result = tierdown.move_version(CheckpointVersion.objects.get(pk=v1["id"]), progress)
    assert "leased" in result["skipped"]
    assert seen["read"] == before
    version = CheckpointVersion.objects.get(pk=v1["id"])
    assert version.tier == "hot" and hashes(v1["path"]) == before
    cold = os.path.join(tierdown.cold_filesystem(version.job.capacity_pool).path, "llm",
                        "step-1")
    assert not os.path.exists(cold)
    assert list(tierdown.due()) == []  # leased: not due

    service.release_lease(seen["lease"])
    assert [v.pk for v in tierdown.due()] == [v1["id"]]
    result = tierdown.move_version(version)
    assert result["cold_path"] == cold and hashes(cold) == before
    assert not os.path.exists(v1["path"])


def test_a_hot_copy_that_does_not_match_its_manifest_is_not_moved(api):
    make_tiered_job(api)
    v1 = save(api, "llm", 1, {"rank0.bin": os.urandom(MiB)})
    save(api, "llm", 2)
    age(v1["id"])
    with open(os.path.join(v1["path"], "rank0.bin"), "r+b") as f:
        f.write(b"rot")  # same size, other bytes
    with pytest.raises(tierdown.TierDownFailed, match="rank0.bin has sha256"):
        tierdown.move_version(CheckpointVersion.objects.get(pk=v1["id"]))
    version = CheckpointVersion.objects.get(pk=v1["id"])
    assert version.tier == "hot" and os.path.isfile(os.path.join(v1["path"], "rank0.bin"))
    assert not os.path.exists(os.path.join(
        tierdown.cold_filesystem(version.job.capacity_pool).path, "llm", "step-1"))


def cold_stats(root: str) -> dict:
    """Each cold file's (inode, mtime_ns, size): unchanged when nothing wrote it again."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for fn in files:
            st = os.stat(os.path.join(dirpath, fn))
            out[os.path.relpath(os.path.join(dirpath, fn), root)] = (
                st.st_ino, st.st_mtime_ns, st.st_size)
    return out


def test_a_prewarmed_version_tiers_down_again_onto_the_cold_copy_it_kept(api, worker):
    """Pre-warm keeps the cold copy; once the restore's lease is released the version is
    due again and tier-down switches back to that copy, writing nothing to the capacity
    pool. A kept copy that is no longer whole is made again."""
    make_tiered_job(api)
    v1 = begin(api, "llm", 1)
    shards = {f"rank{i}.bin": os.urandom(2 * MiB + i) for i in range(2)}
    manifest = write_shards(v1, shards)
    write_shards(v1, {".metadata": b"dcp metadata beside the shards"})
    assert commit(api, "llm", v1, manifest).status_code == 200
    before = hashes(v1["path"])
    total = sum(map(len, shards.values())) + 30
    save(api, "llm", 2)
    age(v1["id"])
    url = f"/api/v1/checkpoint-jobs/llm/versions/{v1['id']}/"

    def tier_down_once() -> dict:
        started = tasks.tier_all()["jobs"]
        assert len(started) == 1, started
        job = wait_job(api, f"/api/v1/jobs/{started[0]}/")
        assert job["state"] == "succeeded", job
        assert api.get(url).json()["tier"] == "cold"
        assert not os.path.exists(v1["path"])  # the hot copy is released
        return job["result"]

    def restore_and_release() -> None:
        r = api.post(f"{url}lease/", {"ttl_seconds": 600}, format="json")
        assert r.status_code == 201 and r.json()["prewarm_job"], r.json()
        assert wait_job(api, r.json()["prewarm_job"])["state"] == "succeeded"
        assert api.get(url).json()["tier"] == "hot" and hashes(v1["path"]) == before
        assert list(tierdown.due()) == []  # leased
        assert api.delete(f"/api/v1/checkpoint-leases/{r.json()['id']}/").status_code == 204

    assert tier_down_once()["copied_bytes"] == total
    cold = CheckpointVersion.objects.get(pk=v1["id"]).cold_path
    kept = cold_stats(cold)

    restore_and_release()
    assert CheckpointVersion.objects.get(pk=v1["id"]).cold_path == cold  # copy kept
    result = tier_down_once()
    assert result["copied_bytes"] == 0 and result["reused_cold_copy"] is True, result
    assert cold_stats(cold) == kept  # not one cold file written again
    assert hashes(cold) == before

    # the kept copy rots (same size, other bytes): the next tier-down copies it again
    restore_and_release()
    with open(os.path.join(cold, "rank1.bin"), "r+b") as f:
        f.write(b"rot")
    result = tier_down_once()
    assert result["copied_bytes"] == total and "reused_cold_copy" not in result, result
    assert hashes(CheckpointVersion.objects.get(pk=v1["id"]).cold_path) == before
