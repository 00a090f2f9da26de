"""A training process that saves one checkpoint through the Strata SDK and stops dead at a
chosen point, so that the crash tests can `kill -9` it there (no Django here: a training
process only has the SDK).

It prints `SHARD <name> <size> <sha256>` for every file it finished writing and then
`STOP <point>` when it reaches the point, after which it sleeps until it is killed.

Points: `before-shard` (version begun, nothing written), `mid-shard` (the first shard
whole, the second half written and fsynced), `after-shards` (every shard whole, no commit
sent), `commit-partial` (the commit request's body half sent), `commit-sent` (the whole
commit request sent, the plane still verifying it), `dcp-before-metadata` (a real PyTorch
DCP save through the SDK writer: every shard written, `.metadata` not yet),
`dcp-before-commit` (DCP's `.metadata` written, the catalog commit not sent) and `none`
(save and commit normally).
"""
import argparse
import hashlib
import json
import os
import sys
import time

POINTS = ("before-shard", "mid-shard", "after-shards", "commit-partial", "commit-sent",
          "dcp-before-metadata", "dcp-before-commit", "none")


def stop(point: str) -> None:
    print(f"STOP {point}", flush=True)
    while True:
        time.sleep(3600)


def report(path: str, name: str) -> None:
    with open(os.path.join(path, name), "rb") as f:
        data = f.read()
    print(f"SHARD {name} {len(data)} {hashlib.sha256(data).hexdigest()}", flush=True)


class SlowBody:
    """A request body that hands requests its bytes in pieces and stops dead at a point:
    half-way (`commit-partial`) or once the last byte went to the socket (`commit-sent`)."""

    def __init__(self, data: bytes, point: str):
        self.data, self.point, self.pos = data, point, 0

    def __len__(self):  # requests sends a Content-Length of the whole body
        return len(self.data)

    def read(self, n=-1):
        half = len(self.data) // 2
        if self.point == "commit-partial" and self.pos >= half:
            stop(self.point)
        if self.pos >= len(self.data):
            if self.point == "commit-sent":
                stop(self.point)
            return b""
        end = len(self.data) if n is None or n < 0 else self.pos + n
        if self.point == "commit-partial":
            end = min(end, half)
        chunk = self.data[self.pos:end]
        self.pos += len(chunk)
        return chunk


def save_files(client, a) -> None:
    from services.checkpoints.sdk import manifest_of

    version = client.begin(a.job, a.step)
    print(f"VERSION {version.id} {version.path}", flush=True)
    if a.point == "before-shard":
        stop(a.point)
    for i in range(a.shards):
        name = f"rank{i}.bin"
        data = os.urandom(a.size)
        with open(os.path.join(version.path, name), "wb") as f:
            if a.point == "mid-shard" and i == 1:
                f.write(data[:a.size // 2])
                f.flush()
                os.fsync(f.fileno())
                stop(a.point)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        report(version.path, name)
    if a.point == "after-shards":
        stop(a.point)
    manifest = manifest_of(version.path, sha256=True)
    if a.point in ("commit-partial", "commit-sent"):
        body = json.dumps({"manifest": manifest}).encode()
        url = f"{client.url}/api/v1/checkpoint-jobs/{a.job}/versions/{version.id}/commit/"
        client.session.post(url, data=SlowBody(body, a.point),
                            headers={"Content-Type": "application/json"})
        raise SystemExit("the commit request returned before the process was killed")
    client.commit(version, manifest)
    print("COMMITTED", flush=True)


def save_dcp(client, a) -> None:
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    from services.checkpoints import sdk

    warnings.filterwarnings("ignore")
    point = a.point

    class CrashingWriter(sdk.StrataStorageWriter):
        def finish(self, metadata, results):
            print(f"VERSION {self.version.id} {self.version.path}", flush=True)
            for name in sorted(os.listdir(self.version.path)):
                report(self.version.path, name)
            if point == "dcp-before-metadata":
                stop(point)
            FileSystemWriter.finish(self, metadata, results)  # writes .metadata
            report(self.version.path, ".metadata")
            stop(point)

    torch.manual_seed(a.step)
    state = {"w": torch.randn(a.size // 4 // a.shards, a.shards)}
    dcp.save(state, storage_writer=CrashingWriter(client, a.job, a.step, thread_count=2))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--point", choices=POINTS, required=True)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--size", type=int, default=1 << 20, help="bytes per shard")
    a = p.parse_args(argv)

    from services.checkpoints.sdk import CheckpointClient

    client = CheckpointClient(a.url, a.token)
    if a.point.startswith("dcp-"):
        save_dcp(client, a)
    else:
        save_files(client, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
