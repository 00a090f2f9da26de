"""AWS's s3torchconnector (its Rust/CRT client, not botocore) saving and loading PyTorch
Distributed Checkpoints through Strata's gateway: ``S3StorageWriter`` / ``S3StorageReader``
pointed at the gateway by ``AWS_ENDPOINT_URL`` with path-style addressing, every tensor and
value equal after the load, with both of its readers (range-coalescing and sequential), on a
plain bucket and on one whose default encryption stores the bytes SSE-S3; and two gloo ranks
saving a sharded state, loaded back by one rank and by three."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="DCP needs torch==2.13.0 (the test extra)")
pytest.importorskip("s3torchconnector", reason="the test extra installs s3torchconnector[dcp]")
import torch.distributed.checkpoint as dcp  # noqa: E402
from s3torchconnector import S3ClientConfig, S3ReaderConstructor  # noqa: E402
from s3torchconnector.dcp import S3StorageReader, S3StorageWriter  # noqa: E402

from services.object.tests.gatewayproc import ACCESS, SECRET  # noqa: E402
from tests.kit import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

MiB = 1 << 20
REGION = "us-east-1"
BIG = 5 * MiB      # float32 elements: 20 MiB, four 5 MiB parts of a multipart upload


def state(zeros: bool = False) -> dict:
    """A model-like state: one large tensor (multipart), many small ones, other dtypes and a
    value that is no tensor."""
    big = torch.zeros(BIG) if zeros else torch.arange(BIG, dtype=torch.float32) * 0.25 - 3.0
    small = {f"layer.{i}.bias": torch.zeros(64) if zeros else torch.full((64,), float(i)) for i in range(40)}
    return {"model": {"embed": big, **small,
                      "steps": torch.zeros(3, dtype=torch.int64) if zeros else torch.tensor([7, 8, 9]),
                      "half": torch.zeros(1000, dtype=torch.bfloat16) if zeros
                      else torch.linspace(-1, 1, 1000).to(torch.bfloat16)},
            "extra": {"epoch": 0 if zeros else 3, "name": "" if zeros else "strata"}}


def same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    return a == b


@pytest.fixture
def endpoint(gateway, monkeypatch):
    """The CRT client takes its endpoint and credentials from the environment, as it would
    for any S3-compatible store."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", gateway.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return gateway.endpoint


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("encryption", [None, "AES256"])
def test_dcp_save_and_load_through_s3torchconnector(endpoint, s3, encryption):
    bucket = f"s3t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    if encryption:
        s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": encryption}}]})
    config = S3ClientConfig(force_path_style=True, part_size=5 * MiB, max_attempts=1)
    uri = f"s3://{bucket}/llm/step-100"
    saved = state()
    dcp.save(saved, storage_writer=S3StorageWriter(REGION, uri, s3client_config=config, thread_count=2))

    listed = s3.list_objects_v2(Bucket=bucket, Prefix="llm/step-100/")["Contents"]
    keys = sorted(o["Key"].rsplit("/", 1)[-1] for o in listed)
    assert ".metadata" in keys and any(k.endswith(".distcp") for k in keys), keys
    assert sum(o["Size"] for o in listed) > BIG * 4
    for obj in listed:
        head = s3.head_object(Bucket=bucket, Key=obj["Key"])
        assert head.get("ServerSideEncryption") == encryption
    shard = max(listed, key=lambda o: o["Size"])["Key"]   # the CRT uploaded it in 5 MiB parts
    assert s3.head_object(Bucket=bucket, Key=shard, PartNumber=1)["PartsCount"] >= 4

    for reader in (S3ReaderConstructor.dcp_optimized(), S3ReaderConstructor.sequential()):
        loaded = state(zeros=True)
        dcp.load(loaded, storage_reader=S3StorageReader(REGION, uri, s3client_config=config,
                                                        reader_constructor=reader))
        assert same(loaded, saved)


def run_ranks(mode: str, world: int, uri: str) -> list[str]:
    """``world`` rank processes of s3t_ranks.py; their output (each must exit 0)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "services.object.tests.s3t_ranks", mode, "--rank", str(r),
                               "--world", str(world), "--port", str(port), "--uri", uri],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, out
            outs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return outs


def test_two_ranks_save_one_and_three_load(endpoint, s3):
    bucket = f"s3t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/llm/step-200"
    run_ranks("save", 2, uri)
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert "llm/step-200/.metadata" in keys, keys
    for rank in (0, 1):   # each rank wrote its shard files (two writer threads each)
        assert any(k.startswith(f"llm/step-200/__{rank}_") and k.endswith(".distcp") for k in keys), keys
    for world in (1, 3):
        outs = run_ranks("load", world, uri)
        assert all("tensors equal" in out for out in outs), outs
