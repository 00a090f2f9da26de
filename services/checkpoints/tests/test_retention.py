"""Retention on a real file system, run as a job on a real worker: it keeps the last N
committed, every K-th step, pinned and leased versions and deletes only the rest, files
and all; the preview says why each version stays."""
import os

import pytest

from services.checkpoints import tasks
from services.checkpoints.models import CheckpointVersion
from services.checkpoints.tests.conftest import begin, make_job, save
from tests.kit import wait_job

pytestmark = [pytest.mark.root]


def test_retention_keeps_last_every_kth_pinned_leased_and_deletes_the_rest(api, worker):
    make_job(api, keep_last=2, keep_every=300)
    saved = {step: save(api, "llm", step) for step in range(100, 1100, 100)}
    aborted = begin(api, "llm", 1100)
    with open(os.path.join(aborted["path"], "half.bin"), "wb") as f:
        f.write(b"h" * 10)
    base = "/api/v1/checkpoint-jobs/llm/versions"
    assert api.post(f"{base}/{aborted['id']}/abort/").json()["state"] == "aborted"
    r = api.post(f"{base}/{saved[200]['id']}/pin/", {"reason": "best eval"}, format="json")
    assert r.status_code == 200 and r.json()["pinned"]
    r = api.post(f"{base}/{saved[400]['id']}/lease/", {"ttl_seconds": 600, "holder": "eval-7"},
                 format="json")
    assert r.status_code == 201 and r.json()["prewarm_job"] is None
    lease_id = r.json()["id"]

    preview = api.get("/api/v1/checkpoint-jobs/llm/retention-preview/").json()
    keep = {e["step"]: e["reasons"] for e in preview["keep"]}
    assert sorted(e["step"] for e in preview["delete"]) == [100, 500, 700, 800, 1100]
    assert sorted(keep) == [200, 300, 400, 600, 900, 1000]
    assert "latest" in keep[1000] and "among the last 2 committed" in keep[900]
    assert keep[300] == ["every 300th step"] and keep[200] == ["pinned: best eval"]
    assert keep[400][0].startswith("leased by eval-7 until")

    # a file of a deleted version hard-linked into a kept one keeps its bytes there
    linked = os.path.join(saved[1000]["path"], "linked.bin")
    os.link(os.path.join(saved[100]["path"], "rank0.bin"), linked)

    r = api.post("/api/v1/checkpoint-jobs/llm/retention/")
    assert r.status_code == 202
    job = wait_job(api, r.json()["job"])
    assert job["state"] == "succeeded", job
    assert job["progress"] == 100 and sorted(job["result"]["deleted_steps"]) == [100, 500, 700, 800, 1100]

    for step, v in saved.items():
        gone = step in (100, 500, 700, 800)
        assert os.path.exists(v["path"]) != gone, step
        assert CheckpointVersion.objects.get(pk=v["id"]).state == (
            "deleted" if gone else ("committed" if step == 1000 else "superseded"))
    assert not os.path.exists(aborted["path"])
    with open(linked, "rb") as f:
        assert f.read() == b"100" * 100
    assert api.get("/api/v1/checkpoint-jobs/llm/latest/").json()["step"] == 1000

    # a version kept only by a lease or a pin goes once the lease and the pin are gone
    assert api.delete(f"/api/v1/checkpoint-leases/{lease_id}/").status_code == 204
    assert api.post(f"{base}/{saved[200]['id']}/unpin/").status_code == 200
    preview = api.get("/api/v1/checkpoint-jobs/llm/retention-preview/").json()
    assert sorted(e["step"] for e in preview["delete"]) == [200, 400]

    # keep_newer_than keeps everything committed within the duration
    r = api.patch("/api/v1/checkpoint-jobs/llm/", {"keep_newer_than": "1 00:00:00"},
                  format="json")
    assert r.status_code == 200, r.json()
    preview = api.get("/api/v1/checkpoint-jobs/llm/retention-preview/").json()
    assert preview["delete"] == []
    assert "committed less than 1 day, 0:00:00 ago" in {
        reason for e in preview["keep"] for reason in e["reasons"]}

    # the periodic task starts a retention job for every checkpoint job with work to do
    assert api.patch("/api/v1/checkpoint-jobs/llm/", {"keep_newer_than": None},
                     format="json").status_code == 200
    started = tasks.retention_all()["jobs"]
    assert len(started) == 1
    job = wait_job(api, f"/api/v1/jobs/{started[0]}/")
    assert sorted(job["result"]["deleted_steps"]) == [200, 400], job
    assert not os.path.exists(saved[200]["path"]) and os.path.exists(saved[300]["path"])

    # a deleted version cannot be leased; a job holding versions cannot be removed
    r = api.post(f"{base}/{saved[100]['id']}/lease/", {}, format="json")
    assert r.status_code == 409 and "deleted" in r.json()["detail"]
    r = api.delete("/api/v1/checkpoint-jobs/llm/")
    assert r.status_code == 409 and "300" in r.json()["detail"]
