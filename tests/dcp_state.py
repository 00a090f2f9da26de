"""The state the multi-process DCP tests save and load (services/object/tests/s3t_ranks.py,
services/checkpoints/tests/dcp_s3_ranks.py): ``big``, one tensor sharded over the ranks (a
DTensor on a CPU mesh, several multipart parts a rank), ``small.<i>``, many small replicated
tensors, and ``extra``, a value that is no tensor. torch is imported only when called."""


def expected_big(elements: int):
    """The values of ``big`` (float32)."""
    import torch

    return torch.arange(elements, dtype=torch.float32) * 0.5 - 7.0


def state(world: int, zeros: bool, big: int, small: int) -> dict:
    """The state to save (``zeros``: the empty one a load fills in)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    return {"big": distribute_tensor(torch.zeros(big) if zeros else expected_big(big), mesh, [Shard(0)]),
            **{f"small.{i}": torch.zeros(16) if zeros else torch.full((16,), float(i)) for i in range(small)},
            "extra": {"step": 0 if zeros else 7, "name": "" if zeros else "strata"}}


def check(sd: dict, rank: int, world: int, big: int, small: int) -> str:
    """Assert a loaded state holds every saved value; a line saying what was compared."""
    import torch

    local = sd["big"].to_local()
    start = rank * ((big + world - 1) // world)
    assert torch.equal(local, expected_big(big)[start:start + local.numel()]), rank
    for i in range(small):
        assert torch.equal(sd[f"small.{i}"], torch.full((16,), float(i))), i
    assert sd["extra"] == {"step": 7, "name": "strata"}, sd["extra"]
    return f"rank {rank}/{world}: {local.numel()} elements of big and {small} small tensors equal"
