"""The ranks of a multi-process PyTorch DCP save or load on Strata (gloo, CPU): run as a
subprocess by test_dcp_multirank.py, it imports torch once and forks one process per rank
(see `launch`); no Django here: a training process only has the SDK.

The state every rank saves (`build_state`): a small model and its Adam optimizer after one
training step (replicated: the same seed on every rank), a 64x8 tensor sharded by rows
over the ranks as a DTensor, and one tensor per rank (`rank<r>`).

`--mode save`: step S through the SDK's path writer (`client.dcp_writer`, which commits in
`finish()` on the coordinator) and step S+1 through plain `FileSystemWriter` into the
directory of a version begun through the SDK (committed later by the scanner).
With `--kill-rank R --point P` only step S is saved (`--writer sdk|plain`) and rank R
prints `STOP P` once it reaches P, then sleeps until the test kills it:

- `before-shard`: before the rank writes anything;
- `mid-shard`: the rank's data file cut to half its length after writing, as a write cut
  off mid-way leaves it;
- `after-shards`: every shard of the rank written; on the coordinator, before DCP's
  `.metadata` is written;
- `commit`: (coordinator) `.metadata` written, the catalog commit not sent yet.

`--mode load --versions ID,...`: load each version with this process group's world size
(DCP reshards the DTensor) through the SDK reader and through plain `FileSystemReader`
on the leased directory, and compare with `build_state` of the saving world size; prints
`EQUAL <id> <reader>` for each.
"""
import argparse
import os
import sys
import time
import warnings


def stop(point: str) -> None:
    print(f"STOP {point}", flush=True)
    while True:
        time.sleep(3600)


def build_state(world: int, save_world: int, fresh: bool = False):
    """(model, optimizer, state dict) of this process group; `fresh`: zeros to load into."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    torch.manual_seed(1234)  # the same replicated model and data on every rank
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 4))
    optim = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(8, 32)).sum().backward()
    optim.step()
    full = torch.randn(64, 8)
    if fresh:
        model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 4))
        optim = torch.optim.Adam(model.parameters(), lr=0.01)
        full = torch.zeros(64, 8)
    model_sd, optim_sd = get_state_dict(model, optim)
    if fresh:
        for sd in (model_sd, optim_sd["state"]):
            _zero(sd)
    mesh = init_device_mesh("cpu", (world,))
    state = {"model": model_sd, "optim": optim_sd,
             "sharded": distribute_tensor(full, mesh, [Shard(0)])}
    for r in range(save_world):
        state[f"rank{r}"] = torch.zeros(1000) if fresh else torch.full((1000,), float(r + 1))
    return state


def _zero(tree) -> None:
    import torch

    for key, value in tree.items():
        if isinstance(value, dict):
            _zero(value)
        elif isinstance(value, torch.Tensor):
            with torch.no_grad():
                value.zero_()


def _flat(tree, prefix=""):
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, name + "."))
        elif isinstance(value, list):
            out.update(_flat(dict(enumerate(value)), name + "."))
        else:
            out[name] = value
    return out


def same(a, b) -> list:
    """Names whose values differ (DTensors compared by their local shards)."""
    import torch

    fa, fb = _flat(a), _flat(b)
    bad = sorted(set(fa) ^ set(fb))
    for key in set(fa) & set(fb):
        x, y = fa[key], fb[key]
        if hasattr(x, "to_local"):
            x, y = x.to_local(), y.to_local()
        if isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                bad.append(key)
        elif x != y:
            bad.append(key)
    return bad


def crash_wrap(writer, client, rank: int, a) -> None:
    """Make `writer` (and the client's commit) stop on the kill rank at `a.point`."""
    if rank != a.kill_rank:
        return
    write_data, finish = writer.write_data, writer.finish

    def crashing_write(plan, planner):
        if a.point == "before-shard":
            stop(a.point)
        fut = write_data(plan, planner)
        results = fut.wait()
        if a.point == "mid-shard":
            name = sorted({r.storage_data.relative_path for r in results})[0]
            path = os.path.join(str(writer.path), name)
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
                os.fsync(f.fileno())
            stop(a.point)
        if a.point == "after-shards" and rank != 0:
            stop(a.point)
        return fut

    def crashing_finish(*args, **kwargs):
        if a.point == "after-shards":
            stop(a.point)
        out = finish(*args, **kwargs)
        if a.point == "commit" and a.writer == "plain":
            stop(a.point)
        return out

    def crashing_commit(*args, **kwargs):
        stop(a.point)

    writer.write_data, writer.finish = crashing_write, crashing_finish
    if a.point == "commit":
        client.commit = crashing_commit


def save(client, a, rank: int) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    state = build_state(a.world, a.world)
    steps = [("sdk", a.step), ("plain", a.step + 1)]
    if a.kill_rank is not None:
        steps = [(a.writer, a.step)]
    for kind, step in steps:
        if kind == "sdk":
            writer = client.dcp_writer(a.job, step)
        else:
            writer = FileSystemWriter(client.begin(a.job, step).path)
        crash_wrap(writer, client, rank, a)
        dcp.save(state, storage_writer=writer)
        dist.barrier()
    print("SAVED", flush=True)


def load(client, a) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    expected = build_state(a.world, a.save_world)
    for vid in [int(v) for v in a.versions.split(",")]:
        version = client.version(a.job, vid)
        for reader in ("sdk", "plain"):
            target = build_state(a.world, a.save_world, fresh=True)
            assert same(target, expected), "the load target must start out different"
            if reader == "sdk":
                with client.dcp_reader(a.job, version) as r:
                    dcp.load(target, storage_reader=r)
            else:
                with client.restore(a.job, version) as v:
                    dcp.load(target, storage_reader=FileSystemReader(v.path))
            bad = same(target, expected)
            if bad:
                raise SystemExit(f"version {vid} via {reader}: {bad[:5]} differ")
            print(f"EQUAL {vid} {reader}", flush=True)


def run_rank(a) -> int:
    import torch.distributed as dist

    from services.checkpoints.sdk import CheckpointClient

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                            rank=a.rank, world_size=a.world)
    client = CheckpointClient(a.url, a.token)
    try:
        if a.mode == "save":
            save(client, a, a.rank)
        else:
            load(client, a)
        dist.barrier()
    finally:
        client.close()
    dist.destroy_process_group()
    return 0


def launch(a) -> int:
    """Import torch once, then fork one process per rank (importing torch in each of them
    costs seconds of CPU); rank r writes `PID <pid>` and then its output to
    `<logdir>/rank<r>.log`. Exits 0 when every rank did."""
    import traceback

    import torch  # noqa: F401
    import torch.distributed.checkpoint  # noqa: F401

    import services.checkpoints.dcp  # noqa: F401
    import services.checkpoints.sdk  # noqa: F401

    children = []
    for rank in range(a.world):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                fd = os.open(os.path.join(a.logdir, f"rank{rank}.log"),
                             os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                print(f"PID {os.getpid()}", flush=True)
                a.rank = rank
                code = run_rank(a)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    failed = 0
    for pid in children:
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    for name in ("world", "port"):
        p.add_argument(f"--{name}", type=int, required=True)
    for name in ("url", "token", "job", "logdir"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--mode", choices=["save", "load"], default="save")
    p.add_argument("--step", type=int, default=0)
    p.add_argument("--save-world", type=int, default=0, help="world size of the save (load)")
    p.add_argument("--versions", default="", help="version ids to load (load)")
    p.add_argument("--kill-rank", type=int, default=None)
    p.add_argument("--point", choices=["before-shard", "mid-shard", "after-shards", "commit"])
    p.add_argument("--writer", choices=["sdk", "plain"], default="sdk")
    return launch(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
