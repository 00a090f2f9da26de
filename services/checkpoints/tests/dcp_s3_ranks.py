"""One rank of a multi-process DCP save or load through the SDK's S3 writer and reader (run
as a subprocess by test_sdk_s3.py; no Django: a training process only has the SDK).

The state: `big`, one tensor sharded over the ranks (a DTensor on a CPU mesh; a shard is
several multipart parts), `small.<i>`, many small replicated tensors, and `extra`, a
non-tensor value. `save` writes it at `--step` with `--world` ranks (and with
`--also-async` again at step + 1 through `dcp.async_save`); `load` reads the latest version with `--world` ranks (any number: DCP reshards) and checks every value.
"""
import argparse
import sys
import warnings

BIG = 6 << 20  # float32 elements: 24 MiB in all, 12 MiB (3 parts of 5 MiB) a rank of 2
SMALL = 200


def expected_big():
    import torch

    return torch.arange(BIG, dtype=torch.float32) * 0.5 - 7.0


def state(world: int, zeros: bool) -> dict:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    big = torch.zeros(BIG) if zeros else expected_big()
    return {
        "big": distribute_tensor(big, mesh, [Shard(0)]),
        **{f"small.{i}": torch.zeros(16) if zeros else torch.full((16,), float(i))
           for i in range(SMALL)},
        "extra": {"step": 0 if zeros else 7, "name": "" if zeros else "strata"},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["save", "load"])
    for name in ("rank", "world", "port", "step"):
        p.add_argument(f"--{name}", type=int, default=0)
    p.add_argument("--also-async", action="store_true", help="then dcp.async_save at step+1")
    for name in ("url", "token", "job", "endpoint", "access_key", "secret_key"):
        p.add_argument(f"--{name}", required=True)
    a = p.parse_args(argv)

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from services.checkpoints.sdk import CheckpointClient

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                            rank=a.rank, world_size=a.world)
    client = CheckpointClient(a.url, a.token, s3={"endpoint": a.endpoint,
                                                  "access_key": a.access_key,
                                                  "secret_key": a.secret_key})
    MiB = 1 << 20
    if a.mode == "save":
        # parts of 5 MiB past 5 MiB: the ranks' 6 MiB streams go up as multipart uploads
        writer = client.dcp_writer(a.job, a.step, via="s3", thread_count=2,
                                   part_size=5 * MiB, max_concurrency=4,
                                   multipart_threshold=5 * MiB)
        dcp.save(state(a.world, zeros=False), storage_writer=writer)
        if a.rank == 0:
            assert writer.version.state == "committed", writer.version
        if a.also_async:  # the same state at step + 1 with dcp.async_save
            writer = client.dcp_writer(a.job, a.step + 1, via="s3", thread_count=2,
                                       part_size=5 * MiB, max_concurrency=4)
            dcp.async_save(state(a.world, zeros=False), storage_writer=writer).result(300)
            if a.rank == 0:
                assert writer.version.state == "committed", writer.version
    else:
        sd = state(a.world, zeros=True)
        with client.dcp_reader(a.job, part_size=5 * MiB) as reader:
            dcp.load(sd, storage_reader=reader)
        local = sd["big"].to_local()
        start = a.rank * ((BIG + a.world - 1) // a.world)
        assert torch.equal(local, expected_big()[start:start + local.numel()]), a.rank
        for i in range(SMALL):
            assert torch.equal(sd[f"small.{i}"], torch.full((16,), float(i))), i
        assert sd["extra"] == {"step": 7, "name": "strata"}, sd["extra"]
        print(f"rank {a.rank}/{a.world}: {local.numel()} elements of big and "
              f"{SMALL} small tensors equal")
    dist.barrier()
    dist.destroy_process_group()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
