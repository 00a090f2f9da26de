"""One rank of a multi-process DCP save through the Strata SDK (run as a subprocess by the
tests; no Django here: a training process only has the SDK)."""
import argparse
import sys
import warnings


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    for name in ("rank", "world", "port", "step"):
        p.add_argument(f"--{name}", type=int, required=True)
    for name in ("url", "token", "job"):
        p.add_argument(f"--{name}", required=True)
    a = p.parse_args(argv)

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from services.checkpoints.sdk import CheckpointClient

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                            rank=a.rank, world_size=a.world)
    torch.manual_seed(1234)  # the replicated model is the same on every rank
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 4))
    state = {"model": model.state_dict(),
             f"rank{a.rank}": torch.full((1000,), float(a.rank + 1))}
    client = CheckpointClient(a.url, a.token)
    # step: through the SDK writer, which commits in finish() on the coordinator
    dcp.save(state, storage_writer=client.dcp_writer(a.job, a.step))
    dist.barrier()
    # step + 1: plain FileSystemWriter into the version's directory; the scanner commits it
    version = client.begin(a.job, a.step + 1)
    dcp.save(state, checkpoint_id=version.path)
    dist.barrier()
    dist.destroy_process_group()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
