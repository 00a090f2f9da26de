"""The checkpoint workflow from a shell (`strata checkpoint ...`) as a training job's wrapper
script would use it: create a job, begin a step, write shards, commit the directory, see it
as latest, lease and release it, pin it; a commit with a missing shard names the shard."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.checkpoints.models import CheckpointLease, CheckpointVersion

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def strata(api, live_server):
    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/",
           "STRATA_TOKEN": api.token, "PYTHONPATH": str(ROOT)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "console.cli.main", "--json", *args],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return run


def test_create_begin_commit_latest_lease_pin_from_the_cli(api, strata, tmp_path):
    api.post("/api/v1/pools/", {"name": "p1", "driver": "directory"}, format="json")
    api.post("/api/v1/filesystems/", {"name": "ckpt", "pool": "p1"}, format="json")
    r = strata("checkpoint", "create", "llm", "--filesystem", "ckpt", "--keep-last", "2")
    assert r.returncode == 0 and json.loads(r.stdout)["keep_last"] == 2, r.stderr

    version = json.loads(strata("checkpoint", "begin", "llm", "100").stdout)
    shards = Path(version["path"])
    (shards / "rank0.bin").write_bytes(os.urandom(4096))
    (shards / "meta").mkdir()
    (shards / "meta" / ".metadata").write_bytes(b"m" * 10)
    r = strata("checkpoint", "commit", "llm", str(version["id"]), "--dir", str(shards))
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "committed", r.stderr
    stored = CheckpointVersion.objects.get(pk=version["id"])
    assert {e["name"] for e in stored.manifest} == {"rank0.bin", "meta/.metadata"}
    assert all(len(e["sha256"]) == 64 for e in stored.manifest)
    assert json.loads(strata("checkpoint", "latest", "llm").stdout)["step"] == 100

    lease = json.loads(strata("checkpoint", "lease", "llm", str(version["id"]), "--ttl",
                              "600", "--holder", "restore-7").stdout)
    assert CheckpointLease.objects.get(pk=lease["id"]).holder == "restore-7"
    assert strata("checkpoint", "release", str(lease["id"])).returncode == 0
    assert not any(l.active for l in CheckpointLease.objects.filter(pk=lease["id"]))
    r = strata("checkpoint", "pin", "llm", str(version["id"]), "--reason", "paper run")
    assert r.returncode == 0 and CheckpointVersion.objects.get(pk=version["id"]).pinned


def test_a_commit_with_a_missing_shard_names_it_and_commits_nothing(api, strata, tmp_path):
    api.post("/api/v1/pools/", {"name": "p1", "driver": "directory"}, format="json")
    api.post("/api/v1/filesystems/", {"name": "ckpt", "pool": "p1"}, format="json")
    strata("checkpoint", "create", "llm", "--filesystem", "ckpt")
    version = json.loads(strata("checkpoint", "begin", "llm", "1").stdout)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([{"name": "rank0.bin", "size": 10}]))
    r = strata("checkpoint", "commit", "llm", str(version["id"]), "--manifest", str(manifest))
    assert r.returncode == 1 and "rank0.bin: rank0.bin is missing" in r.stderr, r.stderr
    assert CheckpointVersion.objects.get(pk=version["id"]).state == "writing"
    r = strata("checkpoint", "commit", "llm", str(version["id"]), "--manifest",
               str(tmp_path / "nope.json"))
    assert r.returncode == 1 and "cannot read the manifest" in r.stderr
    assert r.stderr.count("\n") == 1  # one line, no traceback
