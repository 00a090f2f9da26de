"""The SDK's S3 path against a live plane (pytest-django's live server) and a real Strata S3
gateway: PyTorch DCP save / async_save / load through the S3 writer and reader (multipart
shards, many small tensors in few objects, commit verified by the catalog), two gloo ranks
saving (save and async_save) and one or three loading, an S3 save killed mid-upload that never becomes latest,
and errors that surface on the future."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings

import pytest

from services.checkpoints import retention, service
from services.checkpoints.models import CheckpointLease, CheckpointVersion
from services.checkpoints.sources import parse_prefix
from services.checkpoints.sdk import CheckpointClient, StrataError
from tests.kit import free_port

torch = pytest.importorskip("torch", reason="the DCP helpers need torch==2.13.0")
pytest.importorskip("boto3", reason="the S3 path needs boto3")
import torch.distributed.checkpoint as dcp  # noqa: E402

from services.checkpoints.tests.dcp_s3_ranks import BIG, SMALL  # noqa: E402
from tests.dcp_state import expected_big  # noqa: E402
from services.object.tests.gatewayproc import ACCESS, SECRET, GatewayProcess  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
MiB = 1 << 20


@pytest.fixture
def gateway(settings):
    """A Strata S3 gateway subprocess; the plane verifies S3 commits through it."""
    work = tempfile.mkdtemp(prefix="strata-test-")
    gw = GatewayProcess(work)
    try:
        gw.start()
        gw.s3 = {"endpoint": gw.endpoint, "access_key": ACCESS, "secret_key": SECRET}
        settings.STRATA_CHECKPOINT_S3 = gw.s3
        gw.client().create_bucket(Bucket="ckpt")
        yield gw
    finally:
        gw.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def client(api, live_server, gateway):
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "bucket": "ckpt"}, format="json")
    assert r.status_code == 201, r.json()
    c = CheckpointClient(live_server.url, api.token, s3=gateway.s3)
    c.token = api.token
    yield c
    c.close()


def objects(gw, version) -> dict:
    bucket, prefix = version.s3_prefix[5:].split("/", 1)
    page = gw.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix):]: o for o in page.get("Contents", [])}


def model_state(seed: int) -> dict:
    torch.manual_seed(seed)
    return {"model": torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 8))
            .state_dict(), "big": torch.randn(3 * MiB + 1000), "step": seed}


def zeros_like(state: dict) -> dict:
    return {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
            "big": torch.zeros_like(state["big"]), "step": -1}


def assert_equal(got: dict, want: dict) -> None:
    assert got["step"] == want["step"]
    assert torch.equal(got["big"], want["big"])
    for k, v in want["model"].items():
        assert torch.equal(got["model"][k], v), k


# DCP's extra writer threads let their exception escape (the writer re-raises it after)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dcp_save_async_save_and_load_through_s3(client, gateway):
    warnings.filterwarnings("ignore", message=".*assuming the intent is to")
    # dcp.save: the job has only a bucket, so the writer goes through S3
    want = model_state(1)
    writer = client.dcp_writer("llm", 1, part_size=5 * MiB, multipart_threshold=5 * MiB,
                               sha256=True)
    assert type(writer).__name__ == "StrataS3StorageWriter"
    dcp.save(want, storage_writer=writer)
    assert writer.version.state == "committed" and client.latest("llm").step == 1
    version = client.version("llm", writer.version.id)
    assert version.raw["location"] == "s3"
    stored = objects(gateway, version)
    # the catalog verified exactly what is in the bucket, checksums included
    assert {e["name"]: e["size"] for e in version.raw["manifest"]} == {
        n: o["Size"] for n, o in stored.items()}
    assert all(len(e["sha256"]) == 64 for e in version.raw["manifest"])
    assert any("-" in o["ETag"] for o in stored.values()), "the 12 MiB shard went up in 3 parts"

    # dcp.async_save with the S3 writer: the future ends after the commit
    want2 = model_state(2)
    fut = dcp.async_save(want2, storage_writer=client.dcp_writer("llm", 2, via="s3"))
    fut.result(timeout=120)
    assert client.latest("llm").step == 2

    # the SDK's async_save: training changes its tensors while the save runs
    want3 = model_state(3)
    expected = {"model": {k: v.clone() for k, v in want3["model"].items()},
                "big": want3["big"].clone(), "step": 3}
    future = client.job("llm").async_save(want3, 3)
    want3["big"].add_(1.0)
    v3 = future.result(timeout=120)
    assert (v3.step, v3.state) == (3, "committed") and client.latest("llm").step == 3

    # load the latest (ranged GETs) under a lease, then an older one by version
    target = zeros_like(expected)
    with client.dcp_reader("llm") as reader:
        assert type(reader).__name__ == "StrataS3StorageReader"
        assert CheckpointLease.objects.filter(version_id=v3.id).exists()
        dcp.load(target, storage_reader=reader)
    assert not CheckpointLease.objects.exists()
    assert_equal(target, expected)
    target = zeros_like(want)
    with client.dcp_reader("llm", version) as reader:
        dcp.load(target, storage_reader=reader)
    assert_equal(target, want)

    # a job on a bucket that does not exist is refused; on one that vanished later, the
    # error surfaces on the future, the version is aborted and latest stays
    with pytest.raises(StrataError) as refused:
        client._call("POST", "checkpoint-jobs/", {"name": "nobucket", "bucket": "missing"})
    assert refused.value.status == 400 and "no bucket missing" in refused.value.detail
    gateway.client().create_bucket(Bucket="gone")
    assert client._call("POST", "checkpoint-jobs/", {"name": "nobucket", "bucket": "gone"})[0] == 201
    gateway.client().delete_bucket(Bucket="gone")
    bad = client.async_save("nobucket", 1, {"x": torch.ones(4)})
    err = bad.exception(timeout=60)
    assert err is not None and "NoSuchBucket" in str(err), err
    assert CheckpointVersion.objects.get(job__name="nobucket", step=1).state == "aborted"
    assert isinstance(client.async_save("no-such-job", 1, {"x": torch.ones(2)}).exception(
        timeout=60), StrataError)
    assert client.latest("llm").step == 3


def rank_cmd(client, gateway, mode, rank, world, port, step=0, *extra) -> list:
    return [sys.executable, "-m", "services.checkpoints.tests.dcp_s3_ranks", mode, *extra,
            "--rank", str(rank), "--world", str(world), "--port", str(port), "--step", str(step),
            "--url", client.url, "--token", client.token, "--job", "llm",
            "--endpoint", gateway.endpoint, "--access_key", ACCESS, "--secret_key", SECRET]


def run_ranks(client, gateway, mode, world, step=0, *extra) -> str:
    port, procs = free_port(), []
    try:
        for rank in range(world):
            procs.append(subprocess.Popen(rank_cmd(client, gateway, mode, rank, world, port, step,
                                                   *extra),
                                          cwd=ROOT, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=180)
            assert p.returncode == 0, out[-3000:]
            outs.append(out)
        return "".join(outs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_two_ranks_save_and_async_save_through_s3_load_with_one_and_three(client, gateway):
    # dcp.save at step 10, then dcp.async_save of the same state at step 11
    run_ranks(client, gateway, "save", 2, 10, "--also-async")
    assert client.latest("llm").step == 11
    first = client.version("llm", CheckpointVersion.objects.get(job__name="llm", step=10).pk)
    assert first.state == "superseded"
    stored = objects(gateway, first)
    # 200 small tensors and a sharded 24 MiB tensor: 2 ranks x 2 streams + .metadata
    assert len(stored) <= 2 * 2 + 1 < SMALL, sorted(stored)
    assert ".metadata" in stored
    assert any("-" in o["ETag"] for o in stored.values()), stored  # a multipart shard
    for version in (first, client.latest("llm")):  # the catalog verified what is there
        manifest = client.version("llm", version.id).raw["manifest"]
        assert {e["name"]: e["size"] for e in manifest} == {
            n: o["Size"] for n, o in objects(gateway, version).items()}

    # one process (no process group) loads the sharded tensor whole, from both ranks' objects
    for version in (first, None):  # step 10, then the latest (11)
        target = {"big": torch.zeros(expected_big(BIG).numel()),
                  **{f"small.{i}": torch.zeros(16) for i in range(SMALL)},
                  "extra": {"step": 0, "name": ""}}
        with client.dcp_reader("llm", version) as reader:
            dcp.load(target, storage_reader=reader)
        assert torch.equal(target["big"], expected_big(BIG))
        assert all(torch.equal(target[f"small.{i}"], torch.full((16,), float(i)))
                   for i in range(SMALL))
        assert target["extra"] == {"step": 7, "name": "strata"}
    # three ranks, each loading its third of the sharded tensor (of the latest)
    out = run_ranks(client, gateway, "load", 3)
    assert all(f"rank {r}/3" in out for r in range(3)), out


KILLED_SAVER = r"""
import sys, threading, time
from services.checkpoints.dcp import s3_filesystem
sent = {"n": 0}
real = s3_filesystem.StreamingUpload._send
def send(self, data):  # a slow network: after two parts, print and stall
    real(self, data)
    sent["n"] += 1
    if sent["n"] == 2:
        print("PARTS SENT", flush=True)
        time.sleep(600)
s3_filesystem.StreamingUpload._send = send
from services.checkpoints.tests import dcp_s3_ranks
sys.exit(dcp_s3_ranks.main(sys.argv[1:]))
"""


def test_s3_save_killed_mid_upload_never_becomes_latest(client, gateway, api):
    warnings.filterwarnings("ignore", message=".*assuming the intent is to")
    want = model_state(1)
    dcp.save(want, storage_writer=client.dcp_writer("llm", 1))
    assert client.latest("llm").step == 1
    cmd = rank_cmd(client, gateway, "save", 0, 1, free_port(), step=2)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SAVER, *cmd[3:]], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "PARTS SENT", line + proc.stdout.read()[-3000:]
        assert gateway.client().list_multipart_uploads(Bucket="ckpt").get("Uploads")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    killed = CheckpointVersion.objects.get(job__name="llm", step=2)
    assert killed.state == "writing"
    assert client.latest("llm").step == 1
    # the scanner finds no .metadata under step 2: it stays writing, latest stays
    r = api.post("/api/v1/checkpoint-jobs/llm/scan/")
    assert r.status_code == 200 and 2 not in r.json().get("committed", []), r.json()
    assert client.latest("llm").step == 1
    killed.refresh_from_db()
    assert killed.state == "writing"
    # the previous version still restores
    target = zeros_like(want)
    with client.dcp_reader("llm") as reader:
        dcp.load(target, storage_reader=reader)
    assert_equal(target, want)
    # once aborted (the stale timeout), retention deletes it with its unfinished uploads
    assert service.abort_version(killed, "its saver was killed")
    retention.apply(killed.job)
    killed.refresh_from_db()
    assert killed.state == "deleted"
    _, prefix = parse_prefix(killed.s3_prefix)
    left = gateway.client().list_multipart_uploads(Bucket="ckpt").get("Uploads", [])
    assert not [u for u in left if u["Key"].startswith(prefix)], left
