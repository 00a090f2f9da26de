"""Verified commit through the API on a real btrfs file system: latest moves only when every
shard is present, whole and matches its checksum; a refusal names every bad shard and
changes nothing; versions never committed time out as aborted and are never offered."""
import os
from datetime import timedelta

import pytest
from django.utils import timezone

from services.checkpoints import service
from services.checkpoints.verify import crc32c_update
from services.checkpoints.models import CheckpointVersion
from services.checkpoints.tests.conftest import (
    begin,
    commit,
    latest_step,
    make_job,
    save,
    write_shards,
)

pytestmark = [pytest.mark.root, pytest.mark.django_db]
MiB = 1 << 20


def test_commit_with_every_shard_moves_latest(api, job):
    v = begin(api, "llm", 100)
    assert v["state"] == "writing" and v["path"].endswith("/train/llm/step-100")
    assert v["relative_path"] == "llm/step-100" and os.path.isdir(v["path"])
    assert api.get("/api/v1/checkpoint-jobs/llm/latest/").status_code == 404

    # every rank asks for the same step and gets the same version
    assert begin(api, "llm", 100)["id"] == v["id"]
    manifest = write_shards(v, {f"rank{r}/shard.bin": os.urandom(MiB + r) for r in range(4)})
    r = commit(api, "llm", v, manifest)
    assert r.status_code == 200, r.json()
    assert r.json()["state"] == "committed" and r.json()["size_bytes"] == 4 * MiB + 6
    latest = api.get("/api/v1/checkpoint-jobs/llm/latest/").json()
    assert (latest["id"], latest["step"], latest["state"]) == (v["id"], 100, "committed")

    # a newer step supersedes it; committing the old one again changes nothing
    save(api, "llm", 200)
    assert latest_step(api, "llm") == 200
    assert CheckpointVersion.objects.get(pk=v["id"]).state == "superseded"
    assert commit(api, "llm", v, manifest).json()["state"] == "superseded"
    # a committed step cannot be begun again
    r = api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": 200}, format="json")
    assert r.status_code == 409 and "already committed" in r.json()["detail"]


def test_missing_and_short_shards_are_refused_naming_both(api, job):
    save(api, "llm", 10)
    v = begin(api, "llm", 20)
    manifest = write_shards(v, {"a.bin": b"a" * 1000, "b.bin": b"b" * 1000, "c.bin": b"c"})
    os.remove(os.path.join(v["path"], "a.bin"))
    with open(os.path.join(v["path"], "b.bin"), "r+b") as f:
        f.truncate(600)
    r = commit(api, "llm", v, manifest)
    assert r.status_code == 409, r.json()
    body = r.json()
    assert body["error"] == "incomplete"
    assert {(s["name"], s["problem"]) for s in body["shards"]} == {("a.bin", "missing"),
                                                                    ("b.bin", "short")}
    assert "a.bin" in body["detail"] and "b.bin" in body["detail"]
    assert CheckpointVersion.objects.get(pk=v["id"]).state == "writing"
    assert latest_step(api, "llm") == 10


def test_checksum_mismatch_is_refused(api, job):
    v = begin(api, "llm", 5)
    manifest = write_shards(v, {"x.bin": b"x" * 4096, "y.bin": b"y" * 4096})
    with open(os.path.join(v["path"], "y.bin"), "r+b") as f:
        f.write(b"Y")  # same size, different bytes
    manifest[0]["crc32c"] = "00000000"  # wrong crc32c on the other shard
    del manifest[0]["sha256"]
    r = commit(api, "llm", v, manifest)
    assert r.status_code == 409
    assert {(s["name"], s["problem"]) for s in r.json()["shards"]} == {
        ("x.bin", "crc32c_mismatch"), ("y.bin", "sha256_mismatch")}
    assert latest_step(api, "llm") is None

    # the right checksums (crc32c as 8 hex digits or S3's base64) commit
    manifest = write_shards(v, {"x.bin": b"x" * 4096, "y.bin": b"y" * 4096})
    manifest[0] = {"name": "x.bin", "size": 4096,
                   "crc32c": f"{crc32c_update(0, b'x' * 4096):08x}"}
    assert commit(api, "llm", v, manifest).status_code == 200
    assert latest_step(api, "llm") == 5


@pytest.mark.parametrize("manifest,needle", [
    ([], "non-empty"),
    ([{"name": "../etc/passwd", "size": 1}], "relative"),
    ([{"name": "a", "size": -1}], "size"),
    ([{"name": "a", "size": 1, "sha256": "zz"}], "sha256"),
])
def test_malformed_manifest_is_a_400(api, job, manifest, needle):
    v = begin(api, "llm", 1)
    r = commit(api, "llm", v, manifest)
    assert r.status_code == 400 and needle in r.json()["detail"], r.json()


def test_version_left_writing_past_timeout_is_aborted_and_never_latest(api):
    make_job(api, writing_timeout="00:10:00")
    save(api, "llm", 1)
    v = begin(api, "llm", 2)
    manifest = write_shards(v, {"s.bin": b"s" * 100})
    assert service.abort_stale() == []  # not stale yet
    assert service.abort_stale(now=timezone.now() + timedelta(minutes=11)) == [v["id"]]
    assert CheckpointVersion.objects.get(pk=v["id"]).state == "aborted"
    r = commit(api, "llm", v, manifest)
    assert r.status_code == 409 and "aborted" in r.json()["detail"]
    assert latest_step(api, "llm") == 1
    versions = api.get("/api/v1/checkpoint-jobs/llm/versions/?state=aborted").json()
    assert [x["step"] for x in versions["results"]] == [2]
    # the step can be saved again from scratch
    v2 = begin(api, "llm", 2)
    assert v2["id"] == v["id"] and v2["state"] == "writing"
    assert not os.path.exists(os.path.join(v2["path"], "s.bin"))


def test_roles_and_references(api, job, viewer_api):
    v = save(api, "llm", 1)
    assert viewer_api.get("/api/v1/checkpoint-jobs/llm/retention-preview/").status_code == 200
    r = viewer_api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": 2}, format="json")
    assert r.status_code == 403
    r = viewer_api.post(f"/api/v1/checkpoint-jobs/llm/versions/{v['id']}/pin/")
    assert r.status_code == 403
    # the file system holding a checkpoint job cannot be deleted from under it
    r = api.delete("/api/v1/filesystems/train/")
    assert r.status_code == 409 and "llm" in r.json()["detail"]
    assert os.path.isdir(v["path"])
