"""The SDK against a live plane (pytest-django's live server) on a real btrfs file system:
save/commit/abort, refusals naming bad shards, restore under a lease (of a cold version:
waiting for its pre-warm with a progress bar), and PyTorch DCP save/async_save/load through
the Strata writer and reader on the job's directory (the S3 path: test_sdk_s3.py)."""
import os
import shutil
import warnings

import pytest

from services.checkpoints import prewarm
from services.checkpoints.models import CheckpointLease, CheckpointVersion
from services.checkpoints.sdk import (
    CheckpointClient,
    IncompleteCheckpointError,
    StrataError,
)
from services.checkpoints.tests.conftest import make_job

pytestmark = [pytest.mark.root]


@pytest.fixture
def client(api, live_server):
    make_job(api)
    c = CheckpointClient(live_server.url, api.token)
    yield c
    c.close()


def test_sdk_save_commit_abort_and_restore(client):
    assert client.latest("llm") is None
    with client.saving("llm", 1) as v:
        for rank in range(2):
            with open(os.path.join(v.path, f"rank{rank}.pt"), "wb") as f:
                f.write(os.urandom(10000))
    assert v.state == "committed"
    assert client.latest("llm").step == 1
    assert CheckpointVersion.objects.get(pk=v.id).manifest[0]["sha256"]

    with pytest.raises(RuntimeError, match="boom"), client.saving("llm", 2) as v2:
        open(os.path.join(v2.path, "partial"), "wb").close()
        raise RuntimeError("boom")
    assert CheckpointVersion.objects.get(pk=v2.id).state == "aborted"

    v3 = client.begin("llm", 3)
    with open(os.path.join(v3.path, "a"), "wb") as f:
        f.write(b"a" * 10)
    with pytest.raises(IncompleteCheckpointError) as err:
        client.commit(v3, [{"name": "a", "size": 20}, {"name": "b", "size": 1}])
    assert err.value.status == 409
    assert {s["name"]: s["problem"] for s in err.value.shards} == {"a": "short", "b": "missing"}
    assert client.latest("llm").step == 1

    with client.restore("llm") as version:
        assert version.step == 1 and len(version.raw["leases"]) == 1
        assert sorted(os.listdir(version.path)) == ["rank0.pt", "rank1.pt"]
    assert not CheckpointLease.objects.exists()
    with pytest.raises(StrataError) as err:
        client.begin("nope", 1)
    assert err.value.status == 404

    job = client.job("llm")  # the handle a training loop keeps
    with job.begin(5) as v5:
        with open(os.path.join(v5.path, "model.pt"), "wb") as f:
            f.write(b"weights")
    assert job.latest().step == 5
    with job.restore() as version, open(os.path.join(version.path, "model.pt"), "rb") as f:
        assert f.read() == b"weights"


def test_dcp_writer_async_save_and_reader(client):
    torch = pytest.importorskip("torch", reason="the DCP helpers need torch==2.13.0")
    import torch.distributed.checkpoint as dcp

    warnings.filterwarnings("ignore", message=".*assuming the intent is to")
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8)
    state = {"model": model.state_dict(), "step": 10}
    writer = client.dcp_writer("llm", 10)
    dcp.save(state, storage_writer=writer)
    assert writer.version.state == "committed" and client.latest("llm").step == 10

    expected = {k: v.clone() for k, v in model.state_dict().items()}
    future = client.async_save("llm", 20, {"model": model.state_dict(), "step": 20})
    with torch.no_grad():  # training goes on while the save runs: the save has its copy
        model.weight.add_(1.0)
    version = future.result(timeout=120)
    assert (version.step, version.state) == (20, "committed")
    assert client.latest("llm").step == 20

    target = {"model": {k: torch.zeros_like(v) for k, v in expected.items()}, "step": 0}
    with client.dcp_reader("llm") as reader:
        assert CheckpointLease.objects.filter(version_id=version.id).exists()
        dcp.load(target, storage_reader=reader)
    assert not CheckpointLease.objects.exists()
    assert target["step"] == 20
    for k, v in expected.items():
        assert torch.equal(target["model"][k], v)

    # errors surface on the future and leave nothing committed
    bad = client.async_save("no-such-job", 1, {"x": torch.ones(2)})
    assert isinstance(bad.exception(timeout=60), StrataError)


def test_restore_of_a_cold_version_waits_for_prewarm_with_a_progress_bar(client, api, worker,
                                                                         capfd):
    job = client.job("llm")
    shards = {f"rank{i}.bin": os.urandom(2 << 20) for i in range(3)}
    with job.begin(7) as v:
        for name, data in shards.items():
            with open(os.path.join(v.path, name), "wb") as f:
                f.write(data)
    r = api.post("/api/v1/filesystems/", {"name": "capacity", "pool": "p1"}, format="json")
    cold = os.path.join(r.json()["path"], "llm", "step-7")
    shutil.copytree(v.path, cold)
    prewarm.mark_cold(CheckpointVersion.objects.get(pk=v.id), cold)
    assert not os.path.exists(v.path)

    capfd.readouterr()
    with job.restore() as version:  # lease -> pre-warm job -> bar on stderr until it ends
        assert version.tier == "hot"
        for name, data in shards.items():
            with open(os.path.join(version.path, name), "rb") as f:
                assert f.read() == data
    err = capfd.readouterr().err
    assert "pre-warm llm@7 [" in err and "100.0%" in err, err

    updates = []  # a callable instead of the bar sees (percent, message); False: silence
    prewarm.mark_cold(CheckpointVersion.objects.get(pk=v.id), cold)
    with job.restore(progress=lambda pct, msg: updates.append(pct)):
        pass
    assert updates and updates[-1] == 100
    assert "pre-warm" not in capfd.readouterr().err
