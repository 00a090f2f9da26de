"""One rank of a multi-process DCP save or load through the SDK's S3 writer and reader (run
as a subprocess by test_sdk_s3.py; no Django: a training process only has the SDK).

The state is tests.dcp_state's (`big`: 3 parts of 5 MiB a rank of 2). `save` writes it at
`--step` with `--world` ranks (and with `--also-async` again at step + 1 through
`dcp.async_save`); `load` reads the latest version with `--world` ranks (any number: DCP
reshards) and checks every value.
"""
import argparse
import sys
import warnings

from tests import dcp_state

BIG = 6 << 20  # float32 elements: 24 MiB in all, 12 MiB (3 parts of 5 MiB) a rank of 2
SMALL = 200


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["save", "load"])
    for name in ("rank", "world", "port", "step"):
        p.add_argument(f"--{name}", type=int, default=0)
    p.add_argument("--also-async", action="store_true", help="then dcp.async_save at step+1")
    for name in ("url", "token", "job", "endpoint", "access_key", "secret_key"):
        p.add_argument(f"--{name}", required=True)
    a = p.parse_args(argv)

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
        writer = client.dcp_writer(a.job, a.step, via="s3", thread_count=2,
                                   part_size=5 * MiB, max_concurrency=4)
        dcp.save(dcp_state.state(a.world, False, BIG, SMALL), storage_writer=writer)
        if a.rank == 0:
            assert writer.version.state == "committed", writer.version
        if a.also_async:  # the same state at step + 1 with dcp.async_save
            writer = client.dcp_writer(a.job, a.step + 1, via="s3", thread_count=2,
                                       part_size=5 * MiB, max_concurrency=4)
            dcp.async_save(dcp_state.state(a.world, False, BIG, SMALL), storage_writer=writer).result(300)
            if a.rank == 0:
                assert writer.version.state == "committed", writer.version
    else:
        sd = dcp_state.state(a.world, True, BIG, SMALL)
        with client.dcp_reader(a.job, part_size=5 * MiB) as reader:
            dcp.load(sd, storage_reader=reader)
        print(dcp_state.check(sd, a.rank, a.world, BIG, SMALL))
    dist.barrier()
    dist.destroy_process_group()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
