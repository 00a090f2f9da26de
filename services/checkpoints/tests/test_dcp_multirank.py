"""Two gloo ranks (separate processes) save one DCP checkpoint through the SDK writer, and
through plain FileSystemWriter into the version's directory; both commit; one process (a
different world size) loads equal tensors back through the SDK reader."""
import os
import socket
import subprocess
import sys
import warnings

import pytest
from rest_framework.authtoken.models import Token

from services.checkpoints.sdk import CheckpointClient
from services.checkpoints.tests.conftest import make_job

torch = pytest.importorskip("torch", reason="multi-rank DCP needs torch==2.13.0")
import torch.distributed.checkpoint as dcp  # noqa: E402

pytestmark = [pytest.mark.root]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(url, token, step, world=2):
    port, procs = free_port(), []
    try:
        for rank in range(world):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "services.checkpoints.tests.dcp_ranks",
                 "--rank", str(rank), "--world", str(world), "--port", str(port),
                 "--step", str(step), "--url", url, "--token", token, "--job", "llm"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0, out[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_ranks_save_through_sdk_and_plain_writer_then_load_with_one(api, live_server):
    make_job(api)
    token = Token.objects.get(user=api.user).key
    client = CheckpointClient(live_server.url, token)
    try:
        run_ranks(live_server.url, token, 100)
        # 100 was committed by rank 0's finish(); 101 (plain writer) by nobody yet
        assert client.latest("llm").step == 100
        r = api.post("/api/v1/checkpoint-jobs/llm/scan/")
        assert r.json()["committed"] == [101], r.json()
        assert client.latest("llm").step == 101

        torch.manual_seed(1234)
        model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 4))
        for step in (100, 101):
            version = client.version("llm", next(
                v["id"] for v in api.get("/api/v1/checkpoint-jobs/llm/versions/").json()[
                    "results"] if v["step"] == step))
            target = {"model": {k: torch.zeros_like(v) for k, v in model.state_dict().items()},
                      "rank0": torch.zeros(1000), "rank1": torch.zeros(1000)}
            with warnings.catch_warnings(), client.dcp_reader("llm", version) as reader:
                warnings.simplefilter("ignore")
                dcp.load(target, storage_reader=reader)
            for k, v in model.state_dict().items():
                assert torch.equal(target["model"][k], v), (step, k)
            assert torch.equal(target["rank0"], torch.full((1000,), 1.0))
            assert torch.equal(target["rank1"], torch.full((1000,), 2.0))
    finally:
        client.close()
