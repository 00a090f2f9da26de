"""Crash injection: a training process saving through the SDK is killed with SIGKILL at
every point of a save (before any shard, mid-shard, after the shards but before DCP's
`.metadata` or before the commit, half-way through the commit request and with the commit
request sent). `latest` never moves to an incomplete version; the previous version is
still the latest and restores byte for byte; the half-written version stays `writing`
(a retried commit or a scan does not commit it) and is `aborted` once the job's writing
timeout, shortened here, has passed. A process killed once its save was whole (after
DCP's `.metadata`, or with its commit request in the plane's hands) leaves a version that
commits whole or not at all.

Real processes: the plane is pytest-django's live server, the saver a subprocess
(`crash_saver.py`) on a btrfs pool made through the API."""
import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

from services.checkpoints import scanner, service
from services.checkpoints.models import CheckpointJob, CheckpointVersion
from services.checkpoints.sdk import (
    CheckpointClient,
    IncompleteCheckpointError,
    StrataError,
)
from services.checkpoints.tests.conftest import make_job
from tests.kit import wait_for

pytestmark = [pytest.mark.root]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
SAVER = os.path.join(os.path.dirname(__file__), "crash_saver.py")
MiB = 1 << 20


@pytest.fixture
def client(api, live_server):
    make_job(api, writing_timeout="01:00:00")
    c = CheckpointClient(live_server.url, api.token)
    c.token = api.token
    yield c
    c.close()


def sha256_of(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def save_previous(client) -> dict:
    """Step 1, saved and committed normally: {name: sha256} of its shards."""
    shards = {f"rank{i}.bin": os.urandom(MiB + i) for i in range(3)}
    with client.saving("llm", 1) as v:
        for name, data in shards.items():
            with open(os.path.join(v.path, name), "wb") as f:
                f.write(data)
    assert v.state == "committed"
    return {name: hashlib.sha256(data).hexdigest() for name, data in shards.items()}


def restored_hashes(client) -> tuple:
    """(step, {name: sha256}) of what a restarted job restores: latest, under a lease."""
    with client.restore("llm") as version:
        return version.step, {name: sha256_of(os.path.join(version.path, name))
                              for name in sorted(os.listdir(version.path))}


def run_and_kill(client, point: str, timeout=60, **kw) -> dict:
    """Run the saver until it reports `point`, SIGKILL it; what it wrote (and where)."""
    cmd = [sys.executable, SAVER, "--url", client.url, "--token", client.token,
           "--job", "llm", "--step", "2", "--point", point]
    for key, value in kw.items():
        cmd += [f"--{key}", str(value)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {"shards": {}, "version": None, "path": None}
    try:
        deadline = time.monotonic() + timeout
        for line in proc.stdout:
            words = line.split()
            if words[:1] == ["VERSION"]:
                out["version"], out["path"] = int(words[1]), words[2]
            elif words[:1] == ["SHARD"]:
                out["shards"][words[1]] = words[3]
            elif words[:1] == ["STOP"]:
                assert words[1] == point
                break
            assert time.monotonic() < deadline, f"the saver did not reach {point}"
        else:
            raise AssertionError(f"the saver ended before {point}: {proc.stderr.read()}")
        proc.send_signal(signal.SIGKILL)  # kill -9: no handler, no abort, no cleanup
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return out


def version_state(version_id: int) -> str:
    return CheckpointVersion.objects.get(pk=version_id).state


def assert_previous_is_latest(client, previous: dict) -> None:
    latest = client.latest("llm")
    assert (latest.step, latest.state) == (1, "committed")
    assert restored_hashes(client) == (1, previous)


def assert_times_out_aborted(client, api, version_id: int, previous: dict) -> None:
    """The half-written version ages out as aborted; latest and its bytes do not change."""
    assert service.abort_stale() == []  # an hour-long timeout: not yet
    r = api.patch("/api/v1/checkpoint-jobs/llm/", {"writing_timeout": "00:00:01"},
                  format="json")
    assert r.status_code == 200, r.json()
    time.sleep(1.2)
    assert version_id in service.abort_stale()  # what the minute task runs
    assert version_state(version_id) == "aborted"
    with pytest.raises(StrataError) as err:  # never offered for restore
        client.lease(client.version("llm", version_id))
    assert err.value.status == 409
    assert_previous_is_latest(client, previous)


@pytest.mark.parametrize("point", ["before-shard", "mid-shard", "after-shards",
                                   "commit-partial"])
def test_killed_before_the_save_is_whole_never_moves_latest(client, api, point):
    previous = save_previous(client)
    got = run_and_kill(client, point, shards=4, size=2 * MiB)
    vid = got["version"]
    assert {"before-shard": 0, "mid-shard": 1}.get(point, 4) == len(got["shards"])
    if point == "mid-shard":
        assert os.path.getsize(os.path.join(got["path"], "rank1.bin")) == MiB
    time.sleep(0.3)  # a truncated commit request reaches the plane and fails there
    assert version_state(vid) == "writing"
    assert_previous_is_latest(client, previous)

    # the restarted job (or an operator) retries the commit with the full manifest of the
    # save: refused, naming every shard that is missing or short; nothing moves
    manifest = [{"name": f"rank{i}.bin", "size": 2 * MiB} for i in range(4)]
    if point in ("after-shards", "commit-partial"):
        for e in manifest:
            e["sha256"] = got["shards"][e["name"]]
        manifest.append({"name": "optimizer.bin", "size": 10})  # a shard it never wrote
    with pytest.raises(IncompleteCheckpointError) as err:
        client.commit(client.version("llm", vid), manifest)
    expected = {"before-shard": {f"rank{i}.bin" for i in range(4)},
                "mid-shard": {"rank1.bin", "rank2.bin", "rank3.bin"}}.get(
                    point, {"optimizer.bin"})
    assert {s["name"] for s in err.value.shards} == expected
    if point == "mid-shard":
        assert {s["name"]: s["problem"] for s in err.value.shards}["rank1.bin"] == "short"
    # the scanner finds nothing it may commit in what the dead process left
    scanner.scan_job(CheckpointJob.objects.get(name="llm"))
    assert version_state(vid) == "writing"
    assert_times_out_aborted(client, api, vid, previous)


def test_killed_before_dcp_metadata_stays_writing(client, api):
    pytest.importorskip("torch", reason="a real DCP save needs torch==2.13.0")
    previous = save_previous(client)
    got = run_and_kill(client, "dcp-before-metadata", shards=2, size=2 * MiB)
    vid = got["version"]
    assert got["shards"] and all(n.endswith(".distcp") for n in got["shards"])
    assert not os.path.exists(os.path.join(got["path"], ".metadata"))
    summary = scanner.scan_job(CheckpointJob.objects.get(name="llm"))
    assert summary["committed"] == [] and 2 in summary["writing"], summary
    assert version_state(vid) == "writing"
    assert_previous_is_latest(client, previous)
    assert_times_out_aborted(client, api, vid, previous)


def test_killed_after_dcp_metadata_commits_whole_through_the_scanner(client, api):
    """Every shard and `.metadata` were written when the process died before its catalog
    commit: the scanner verifies the DCP checkpoint and commits it, whole."""
    pytest.importorskip("torch", reason="a real DCP save needs torch==2.13.0")
    previous = save_previous(client)
    got = run_and_kill(client, "dcp-before-commit", shards=2, size=2 * MiB)
    assert ".metadata" in got["shards"]
    assert version_state(got["version"]) == "writing"
    assert_previous_is_latest(client, previous)
    summary = scanner.scan_job(CheckpointJob.objects.get(name="llm"))
    assert summary["committed"] == [2], summary
    assert restored_hashes(client) == (2, got["shards"])
    # the previous version is superseded but still restores byte for byte
    v1 = CheckpointVersion.objects.get(job__name="llm", step=1)
    assert v1.state == "superseded"
    with client.restore("llm", client.version("llm", v1.pk)) as v:
        assert {n: sha256_of(os.path.join(v.path, n)) for n in os.listdir(v.path)} == previous


def test_killed_with_the_commit_request_sent_commits_whole_or_not_at_all(client, api):
    """The whole commit request reached the plane when the process died (the plane is
    still hashing 64 MiB): the plane finishes it on its own; the version is committed
    whole, latest moves to it in the same transaction, and its bytes are the saver's."""
    previous = save_previous(client)
    got = run_and_kill(client, "commit-sent", shards=4, size=16 * MiB)
    vid = got["version"]
    assert wait_for(lambda: version_state(vid), 30, "the sent commit to finish",
                    until=lambda state: state != "writing") == "committed"
    version = CheckpointVersion.objects.get(pk=vid)
    assert version.job.latest_id == vid
    assert {e["name"]: e["sha256"] for e in version.manifest} == got["shards"]
    assert restored_hashes(client) == (2, got["shards"])
    v1 = CheckpointVersion.objects.get(job__name="llm", step=1)
    with client.restore("llm", client.version("llm", v1.pk)) as v:
        assert {n: sha256_of(os.path.join(v.path, n)) for n in os.listdir(v.path)} == previous
