"""Real multi-process PyTorch DCP on Strata (gloo, CPU; each rank a process running
dcp_ranks.py, the plane pytest-django's live server).

- Four ranks save a small model, its Adam state, a row-sharded DTensor and per-rank tensors
  through the SDK's path writer (committed in `finish()`) and through plain
  `FileSystemWriter` into a version's directory (committed by the scanner); two ranks load
  both back through the SDK reader and through plain `FileSystemReader`, equal.
- Crash injection with four ranks (test_crash.py kills a single saving process at more
  points, including a half-sent commit request): one rank other than the coordinator
  killed mid-shard (SDK writer and plain writer), and the coordinator killed before any
  shard, mid-shard, after every shard but before `.metadata`, and with `.metadata` written
  but the commit not sent. The launcher then kills the surviving ranks, as torchrun does.
  `latest` never moves to the incomplete version, a scan does not commit it, and the
  previous version still restores equal. In the last case the save is whole: the scanner
  verifies and commits it, and two ranks load it back equal.
"""
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

from services.checkpoints import scanner
from services.checkpoints.models import CheckpointJob, CheckpointVersion
from services.checkpoints.sdk import CheckpointClient
from tests.kit import free_port, wait_for

torch = pytest.importorskip("torch", reason="multi-rank DCP needs torch==2.13.0")
import torch.distributed.checkpoint as dcp  # noqa: E402

pytestmark = [pytest.mark.root]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@pytest.fixture
def client(api, live_server):
    """Job `llm` on file system `train` of a directory pool, and an SDK client."""
    assert api.post("/api/v1/pools/", {"name": "d", "driver": "directory"},
                    format="json").status_code == 201
    assert api.post("/api/v1/filesystems/", {"name": "train", "pool": "d"},
                    format="json").status_code == 201
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "filesystem": "train"},
                 format="json")
    assert r.status_code == 201, r.json()
    c = CheckpointClient(live_server.url, api.token)
    c.token = api.token
    yield c
    c.close()


class Ranks:
    """`world` rank processes of dcp_ranks.py in one gloo group (forked by one launcher
    process); rank r's output in its own file, whose first line is `PID <pid>`."""

    def __init__(self, client, tmp_path, world: int, *args: str):
        port = free_port()
        self.logdir = tmp_path / f"ranks-{port}"
        self.logdir.mkdir()
        self.world = world
        self.launcher = subprocess.Popen(
            [sys.executable, "-m", "services.checkpoints.tests.dcp_ranks",
             "--world", str(world), "--port", str(port), "--logdir", str(self.logdir),
             "--url", client.url, "--token", client.token, "--job", "llm", *args],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def output(self, rank: int) -> str:
        path = self.logdir / f"rank{rank}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def pid(self, rank: int) -> int | None:
        first = self.output(rank).split("\n", 1)[0].split()
        return int(first[1]) if first[:1] == ["PID"] else None

    def wait(self, timeout=300) -> list:
        """Every rank's output, once all exited 0."""
        try:
            code = self.launcher.wait(timeout=timeout)
            outs = [self.output(r) for r in range(self.world)]
            assert code == 0, "\n".join(o[-2000:] for o in outs)
        finally:
            self.kill_all()
        return outs

    def kill_at(self, rank: int, point: str, timeout=300) -> None:
        """SIGKILL `rank` once it reports STOP `point`; then the others (the launcher)."""
        def stopped():
            if f"STOP {point}" in self.output(rank):
                return True
            assert self.launcher.poll() is None, "\n".join(
                self.output(r)[-2000:] for r in range(self.world))
            return False

        try:
            wait_for(stopped, timeout, f"rank {rank} to reach {point}")
            assert self.ours(self.pid(rank))
            os.kill(self.pid(rank), signal.SIGKILL)
            time.sleep(0.5)  # what the survivors do meanwhile does not matter: torchrun
        finally:            # kills them once one rank died
            self.kill_all()

    def ours(self, pid) -> bool:
        """Still a rank of this launcher (never signal a pid that was reused)."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                return int(f.read().rsplit(")", 1)[1].split()[1]) == self.launcher.pid
        except (OSError, ValueError, IndexError):
            return False

    def kill_all(self) -> None:
        for rank in range(self.world):
            pid = self.pid(rank)
            if pid is not None and self.ours(pid):
                os.kill(pid, signal.SIGKILL)
        if self.launcher.poll() is None:
            self.launcher.kill()
        self.launcher.wait(10)


def version_of(step: int) -> CheckpointVersion:
    return CheckpointVersion.objects.get(job__name="llm", step=step)


def load_with_two_ranks(client, tmp_path, *steps) -> None:
    ids = ",".join(str(version_of(s).pk) for s in steps)
    out = Ranks(client, tmp_path, 2, "--mode", "load", "--save-world", "4",
                "--versions", ids).wait()
    for rank_out in out:
        for s in steps:
            for reader in ("sdk", "plain"):
                assert f"EQUAL {version_of(s).pk} {reader}" in rank_out, rank_out[-2000:]


def test_four_ranks_save_through_sdk_and_plain_writer_then_two_ranks_load(client, api,
                                                                           tmp_path):
    Ranks(client, tmp_path, 4, "--step", "100").wait()
    # 100 was committed by the coordinator's finish(); 101 (plain writer) by nobody yet
    assert client.latest("llm").step == 100
    assert version_of(101).state == "writing"
    r = api.post("/api/v1/checkpoint-jobs/llm/scan/")
    assert r.json()["committed"] == [101], r.json()
    assert client.latest("llm").step == 101
    for step in (100, 101):  # four ranks' data files, DCP's .metadata, all in the manifest
        names = {e["name"] for e in version_of(step).manifest}
        assert ".metadata" in names and len(names) >= 5, names
    load_with_two_ranks(client, tmp_path, 100, 101)


def save_previous(client) -> dict:
    """Step 1 saved by one process through the SDK writer; the tensors it holds."""
    torch.manual_seed(7)
    state = {"w": torch.randn(256, 4), "b": torch.randn(16)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=client.dcp_writer("llm", 1))
    assert client.latest("llm").step == 1
    return state


def assert_previous_restores(client, previous: dict) -> None:
    latest = client.latest("llm")
    assert (latest.step, latest.state) == (1, "committed")
    target = {k: torch.zeros_like(v) for k, v in previous.items()}
    with warnings.catch_warnings(), client.dcp_reader("llm") as reader:
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=reader)
    for k, v in previous.items():
        assert torch.equal(target[k], v), k


@pytest.mark.parametrize("kill_rank,point,writer", [
    (2, "mid-shard", "sdk"),
    (2, "mid-shard", "plain"),
    (0, "before-shard", "sdk"),
    (0, "mid-shard", "sdk"),
    (0, "after-shards", "sdk"),
])
def test_a_rank_killed_before_the_save_is_whole_never_moves_latest(
        client, api, tmp_path, kill_rank, point, writer):
    previous = save_previous(client)
    ranks = Ranks(client, tmp_path, 4, "--step", "2", "--kill-rank", str(kill_rank),
                  "--point", point, "--writer", writer)
    ranks.kill_at(kill_rank, point)
    version = version_of(2)
    assert version.state == "writing"
    assert not os.path.exists(os.path.join(version.path, ".metadata"))
    assert_previous_restores(client, previous)
    summary = scanner.scan_job(CheckpointJob.objects.get(name="llm"))
    assert summary["committed"] == [] and 2 in summary["writing"], summary
    assert version_of(2).state == "writing"
    assert_previous_restores(client, previous)


def test_the_coordinator_killed_before_its_commit_leaves_a_whole_save_the_scanner_commits(
        client, api, tmp_path):
    previous = save_previous(client)
    ranks = Ranks(client, tmp_path, 4, "--step", "2", "--kill-rank", "0", "--point",
                  "commit", "--writer", "sdk")
    ranks.kill_at(0, "commit")
    assert version_of(2).state == "writing"
    assert os.path.isfile(os.path.join(version_of(2).path, ".metadata"))
    assert_previous_restores(client, previous)
    summary = scanner.scan_job(CheckpointJob.objects.get(name="llm"))
    assert summary["committed"] == [2], summary
    assert client.latest("llm").step == 2
    load_with_two_ranks(client, tmp_path, 2)
    v1 = version_of(1)
    assert v1.state == "superseded"
    target = {k: torch.zeros_like(v) for k, v in previous.items()}
    with warnings.catch_warnings(), client.dcp_reader("llm", client.version("llm", v1.pk)) as r:
        warnings.simplefilter("ignore")
        dcp.load(target, storage_reader=r)
    assert all(torch.equal(target[k], v) for k, v in previous.items())
