"""Pre-warm state machine on a real file system and worker: a hot version needs nothing;
a cold one is copied back to the hot directory with progress, verified, and marked hot,
automatically when a lease is taken on it."""
import hashlib
import os
import shutil

import pytest

from services.checkpoints import prewarm
from services.checkpoints.models import CheckpointVersion
from services.checkpoints.tests.conftest import make_job, save
from tests.kit import wait_job

pytestmark = [pytest.mark.root]
MiB = 1 << 20


def test_prewarm_hot_is_a_noop_and_cold_comes_back_verified(api, worker):
    make_job(api)
    r = api.post("/api/v1/filesystems/", {"name": "capacity", "pool": "p1"}, format="json")
    cold_root = r.json()["path"]
    shards = {f"rank{i}.bin": os.urandom(3 * MiB) for i in range(3)}
    v = save(api, "llm", 50, shards)
    url = f"/api/v1/checkpoint-jobs/llm/versions/{v['id']}"

    r = api.post(f"{url}/prewarm/")
    assert r.status_code == 200 and r.json()["tier"] == "hot"

    # what tier-down does: copy, verify, then release the hot copy
    cold = os.path.join(cold_root, "llm", "step-50")
    shutil.copytree(v["path"], cold)
    with open(os.path.join(cold, "rank1.bin"), "r+b") as f:
        f.truncate(MiB)
    version = CheckpointVersion.objects.get(pk=v["id"])
    with pytest.raises(prewarm.PrewarmFailed, match="rank1.bin"):
        prewarm.mark_cold(version, cold)
    assert os.path.isdir(v["path"])  # hot copy kept while the cold one is incomplete
    shutil.copy(os.path.join(v["path"], "rank1.bin"), os.path.join(cold, "rank1.bin"))
    prewarm.mark_cold(version, cold)
    assert not os.path.exists(v["path"]) and api.get(f"{url}/").json()["tier"] == "cold"

    # a lease on a cold version starts pre-warm; the job reports progress and ends hot
    r = api.post(f"{url}/lease/", {"ttl_seconds": 60}, format="json")
    assert r.status_code == 201 and r.json()["prewarm_job"]
    assert api.get(f"{url}/").json()["tier"] in ("warming", "hot")
    job = wait_job(api, r.json()["prewarm_job"])
    assert job["state"] == "succeeded" and job["progress"] == 100, job
    assert job["result"]["copied_bytes"] == 9 * MiB
    assert job["bytes_done"] == job["bytes_total"] == 9 * MiB, job  # the Job's byte counts
    assert job["result"]["foreground"] is True  # a restore waits: not drawn from the budget
    assert api.get(f"{url}/").json()["tier"] == "hot"
    for name, data in shards.items():
        with open(os.path.join(v["path"], name), "rb") as f:
            assert hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()

    # a cold copy that went missing: pre-warm fails and the version stays cold
    shutil.rmtree(v["path"])
    CheckpointVersion.objects.filter(pk=v["id"]).update(tier="cold", cold_path=cold + "-gone")
    r = api.post(f"{url}/prewarm/")
    assert r.status_code == 202
    job = wait_job(api, r.json()["job"])
    assert job["state"] == "failed" and "no cold copy" in job["error"]
    assert api.get(f"{url}/").json()["tier"] == "cold"
