"""Checkpoints written without Strata's API are found, verified and committed: a real
PyTorch DCP save, a DCP save with a truncated shard or no `.metadata` (stays writing), and
Orbax-style commits (`commit_success.txt`, rename of the temporary directory)."""
import os
import pickle
import warnings

import pytest

from services.checkpoints import formats, service, tasks
from services.checkpoints.models import CheckpointVersion
from services.checkpoints.tests.conftest import latest_step

torch = pytest.importorskip("torch", reason="DCP detection tests need torch==2.13.0")
import torch.distributed.checkpoint as dcp

pytestmark = [pytest.mark.root, pytest.mark.django_db]


def dcp_save(path, seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    state = {"model": model.state_dict(), "step": seed, "extra": {"ids": torch.arange(1000)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state, checkpoint_id=path)
    return state


def scan(api, job="llm"):
    r = api.post(f"/api/v1/checkpoint-jobs/{job}/scan/")
    assert r.status_code == 200, r.json()
    return r.json()


def version(step):
    return CheckpointVersion.objects.get(job__name="llm", step=step)


def test_finished_dcp_save_is_committed_and_broken_ones_stay_writing(api, job):
    base = job["directory"]
    assert os.path.isdir(base)
    dcp_save(os.path.join(base, "step-300"), 300)
    summary = scan(api)
    assert summary["committed"] == [300], summary
    v = version(300)
    assert (v.state, v.format) == ("committed", "dcp")
    assert {e["name"] for e in v.manifest} >= {".metadata", "__0_0.distcp"}
    assert latest_step(api, "llm") == 300

    # a shard cut short after .metadata was written: stays writing, latest unchanged
    dcp_save(os.path.join(base, "step-400"), 400)
    shard = os.path.join(base, "step-400", "__0_0.distcp")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 2)
    # a save interrupted before .metadata
    dcp_save(os.path.join(base, "checkpoint_500"), 500)
    os.remove(os.path.join(base, "checkpoint_500", ".metadata"))
    summary = tasks.scan_all()[0]  # the periodic task does the same
    assert summary["committed"] == [] and sorted(summary["writing"]) == [500]
    assert [p["problem"] for p in summary["incomplete"]["400"]] == ["short"]
    assert version(400).state == "writing" and "__0_0.distcp" in version(400).error
    assert version(500).state == "writing"
    assert latest_step(api, "llm") == 300

    # a later, complete save of the same job commits and moves latest
    dcp_save(os.path.join(base, "step-600"), 600)
    assert scan(api)["committed"] == [600]
    assert latest_step(api, "llm") == 600 and version(300).state == "superseded"


def test_api_begun_version_written_by_plain_dcp_commits_itself(api, job):
    v = service.begin_version(service.CheckpointJob.objects.get(name="llm"), 10)[0]
    dcp_save(v.path, 10)
    assert scan(api)["committed"] == [10]
    assert version(10).format == "dcp" and latest_step(api, "llm") == 10


def test_metadata_naming_foreign_code_is_never_run(api, job, tmp_path):
    base = job["directory"]
    d = os.path.join(base, "step-7")
    os.makedirs(d)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(os.path.join(d, ".metadata"), "wb") as f:
        pickle.dump(Evil(), f)
    with open(os.path.join(d, "__0_0.distcp"), "wb") as f:
        f.write(b"x")
    det = formats.detect(d)
    assert not det.finished and "not allowed" in det.note
    scan(api)
    assert version(7).state == "writing" and not marker.exists()


def test_orbax_style_commits(api, job):
    base = job["directory"]
    # Orbax writes into <step>.orbax-checkpoint-tmp-<n> and renames it when done
    tmp = os.path.join(base, "600.orbax-checkpoint-tmp-1700000000")
    os.makedirs(os.path.join(tmp, "default", "d"))
    for rel, data in {"default/d/shard0": b"a" * 5000, "default/d/shard1": b"b" * 3000,
                      "default/manifest.ocdbt": b"m" * 10}.items():
        with open(os.path.join(tmp, rel), "wb") as f:
            f.write(data)
    summary = scan(api)
    assert summary["writing"] == [600] and latest_step(api, "llm") is None
    assert version(600).state == "writing"
    assert version(600).path == os.path.join(base, "600")
    os.rename(tmp, os.path.join(base, "600"))
    assert scan(api)["committed"] == [600]
    v = version(600)
    assert (v.state, v.format, v.size_bytes) == ("committed", "orbax", 8010)
    assert latest_step(api, "llm") == 600

    # on object stores Orbax marks a finished step with commit_success.txt instead
    final = os.path.join(base, "700")
    os.makedirs(final)
    with open(os.path.join(final, "state"), "wb") as f:
        f.write(b"s" * 100)
    assert scan(api)["committed"] == []  # nothing recognisable yet: left alone
    assert not CheckpointVersion.objects.filter(step=700).exists()
    with open(os.path.join(final, "commit_success.txt"), "w") as f:
        f.write("Checkpoint commit was successful to " + final)
    assert scan(api)["committed"] == [700]
    assert latest_step(api, "llm") == 700
