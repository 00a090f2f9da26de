"""One rank of a multi-process DCP save or load through AWS's s3torchconnector (run as a
subprocess by test_s3_torchconnector.py; the endpoint and keys come from the environment,
``AWS_ENDPOINT_URL`` and ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, as for any
S3-compatible store).

The state: ``big``, one tensor sharded over the ranks (a DTensor on a CPU mesh, several 5 MiB
parts a rank), ``small.<i>`` replicated tensors and ``extra``, a value that is no tensor.
``save`` writes it to ``--uri`` with ``--world`` ranks; ``load`` reads it back with any number
of ranks (DCP reshards) and checks every value."""
import argparse
import sys
import warnings

BIG = 4 << 20   # float32 elements: 16 MiB, 8 MiB a rank of 2
SMALL = 50


def expected_big():
    import torch

    return torch.arange(BIG, dtype=torch.float32) * 0.5 - 7.0


def state(world: int, zeros: bool) -> dict:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    return {"big": distribute_tensor(torch.zeros(BIG) if zeros else expected_big(), mesh, [Shard(0)]),
            **{f"small.{i}": torch.zeros(16) if zeros else torch.full((16,), float(i)) for i in range(SMALL)},
            "extra": {"step": 0 if zeros else 7, "name": "" if zeros else "strata"}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["save", "load"])
    for name in ("rank", "world", "port"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--uri", required=True)
    a = p.parse_args(argv)

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from s3torchconnector import S3ClientConfig
    from s3torchconnector.dcp import S3StorageReader, S3StorageWriter

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world)
    config = S3ClientConfig(force_path_style=True, part_size=5 << 20, max_attempts=1)
    if a.mode == "save":
        dcp.save(state(a.world, zeros=False),
                 storage_writer=S3StorageWriter("us-east-1", a.uri, s3client_config=config, thread_count=2))
    else:
        sd = state(a.world, zeros=True)
        dcp.load(sd, storage_reader=S3StorageReader("us-east-1", a.uri, s3client_config=config))
        local = sd["big"].to_local()
        start = a.rank * ((BIG + a.world - 1) // a.world)
        assert torch.equal(local, expected_big()[start:start + local.numel()]), a.rank
        for i in range(SMALL):
            assert torch.equal(sd[f"small.{i}"], torch.full((16,), float(i))), i
        assert sd["extra"] == {"step": 7, "name": "strata"}, sd["extra"]
        print(f"rank {a.rank}/{a.world}: {local.numel()} elements of big and {SMALL} small tensors equal")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
