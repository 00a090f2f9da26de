"""One rank of a multi-process DCP save or load through AWS's s3torchconnector (run as a
subprocess by test_s3_torchconnector.py; the endpoint and keys come from the environment,
``AWS_ENDPOINT_URL`` and ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, as for any
S3-compatible store).

The state is tests.dcp_state's (``big`` in several 5 MiB parts a rank). ``save`` writes it
to ``--uri`` with ``--world`` ranks; ``load`` reads it back with any number of ranks (DCP
reshards) and checks every value."""
import argparse
import sys
import warnings

from tests import dcp_state

BIG = 4 << 20   # float32 elements: 16 MiB, 8 MiB a rank of 2
SMALL = 50


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["save", "load"])
    for name in ("rank", "world", "port"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--uri", required=True)
    a = p.parse_args(argv)

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from s3torchconnector import S3ClientConfig
    from s3torchconnector.dcp import S3StorageReader, S3StorageWriter

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank, world_size=a.world)
    config = S3ClientConfig(force_path_style=True, part_size=5 << 20, max_attempts=1)
    if a.mode == "save":
        dcp.save(dcp_state.state(a.world, False, BIG, SMALL),
                 storage_writer=S3StorageWriter("us-east-1", a.uri, s3client_config=config, thread_count=2))
    else:
        sd = dcp_state.state(a.world, True, BIG, SMALL)
        dcp.load(sd, storage_reader=S3StorageReader("us-east-1", a.uri, s3client_config=config))
        print(dcp_state.check(sd, a.rank, a.world, BIG, SMALL))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
