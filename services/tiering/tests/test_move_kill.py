"""A real Celery worker process killed with SIGKILL mid-copy of a whole file system's tier
move (slowed by the shared I/O budget so the kill lands mid-way): the file system stays in
its old pool, readable with the same bytes; the next worker's start fails the cut-off Job
(plane/jobs.py reaper) and its move record; moving it again succeeds, with the bytes equal
by hash in the new pool and nothing the dead run made left in either pool."""
import os
import subprocess

import pytest
from conftest import fresh_queue

from plane.models import Job
from services.protection.tests.helpers import (
    WorkerProcess,
    file_hashes,
    kill_mid_copy,
    write_files,
)
from services.storage.drivers import driver_for
from services.storage.models import FileSystem, Pool
from services.tiering.models import TierMove
from tests.kit import run_job, wait_for

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


def subvolumes(pool: str) -> list:
    """Every subvolume in the pool, as paths relative to its mount point."""
    mnt = Pool.objects.get(name=pool).mountpoint
    out = subprocess.run(["btrfs", "subvolume", "list", mnt], capture_output=True,
                         text=True, check=True).stdout
    return sorted(line.split(" path ", 1)[1] for line in out.splitlines())


def flash_and_capacity(api, size: str, shards: int) -> tuple:
    """Pools `flash` and `cap` (capacity) of ``size`` each, and file system `big` in
    `flash` with ``shards`` random 8 MiB files: (its path, its file hashes)."""
    for name, media in (("flash", "flash"), ("cap", "capacity")):
        r = api.post("/api/v1/pools/", {"name": name, "driver": "local", "media": media,
                                        "devices": [f"image:{size}"]}, format="json")
        assert r.status_code == 201, r.json()
    path = api.post("/api/v1/filesystems/", {"name": "big", "pool": "flash"},
                    format="json").json()["path"]
    write_files(path, {f"shard-{i}": os.urandom(8 * MiB) for i in range(shards)})
    return path, file_hashes(path)


def test_kill9_mid_filesystem_move_then_move_again(api, data_dir, tmp_path):
    path, before = flash_and_capacity(api, "400M", 4)
    empty_cap = subvolumes("cap")
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"migration": 4}},
                format="json")  # 32 MiB at 4 MiB/s: about 8 s of copying
    assert r.status_code == 200, r.json()
    fresh_queue()

    worker = WorkerProcess(data_dir, tmp_path)
    try:
        r = api.post("/api/v1/tier-moves/", {"filesystem": "big", "pool": "cap"},
                     format="json")
        assert r.status_code == 202, r.json()
    except BaseException:
        worker.kill9()
        raise
    job_id = r.json()["id"]
    kill_mid_copy(job_id, worker)

    # the file system is where it was, readable, with its bytes
    fs = FileSystem.objects.get(name="big")
    assert fs.pool.name == "flash" and fs.path == path
    assert file_hashes(path) == before
    # the dead run left its half-received copy in the capacity pool and its snapshot
    assert [s for s in subvolumes("cap") if s not in empty_cap], subvolumes("cap")
    assert [s for s in subvolumes("flash") if "/.snapshots/tier-" in s]
    # a second move is refused while the dead one still looks alive
    r = api.post("/api/v1/tier-moves/", {"filesystem": "big", "pool": "cap"}, format="json")
    assert r.status_code == 409, r.json()

    api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
    worker = WorkerProcess(data_dir, tmp_path)
    try:
        wait_for(lambda: Job.objects.get(pk=job_id).state == "failed", 60, "the reaper")
        assert "interrupted" in Job.objects.get(pk=job_id).error
        # the move's record has its own start-up handler, which may run after the Jobs' one
        dead = wait_for(lambda: (lambda m: m.state != "running" and m)(
            TierMove.objects.get(job_id=job_id)), 30, "the moves' reaper")
        assert dead.state == "failed" and "interrupted" in dead.error
        # the worker's start removed what the dead run left (the file system is untouched)
        wait_for(lambda: TierMove.objects.get(pk=dead.pk).tag == "", 30, "the clean-up")
        assert subvolumes("cap") == empty_cap and subvolumes("flash") == ["fs/big"]
        assert file_hashes(path) == before

        job = run_job(api, "/api/v1/tier-moves/", {"filesystem": "big", "pool": "cap"}, 120)
        assert job["state"] == "succeeded", job
    finally:
        worker.kill9()
        fresh_queue()
    fs = FileSystem.objects.get(name="big")
    assert fs.pool.name == "cap" and fs.path != path
    assert file_hashes(fs.path) == before
    assert not os.path.exists(path)  # the hot copy is released
    # nothing half-made is left: only the moved file system in the capacity pool, and
    # no subvolume at all (no copy, no move snapshot) in the flash pool
    drv = driver_for("local")
    assert drv.list_filesystems("cap") == ["big"] and drv.list_filesystems("flash") == []
    assert subvolumes("cap") == sorted(empty_cap + ["fs/big"]), subvolumes("cap")
    assert subvolumes("flash") == []
    assert os.listdir(os.path.join(fs.path, ".snapshots")) == []


class Killed(BaseException):
    """Stands for the SIGKILL of the worker at one chosen point of a move: raised where the
    kill is to land, it unwinds past every ``except Exception`` of the move, which is left
    `running` as a killed run leaves it."""


@pytest.mark.parametrize("written_during_switch", [False, True])
def test_a_move_cut_off_after_its_switch_is_completed_by_the_next_worker(
        api, monkeypatch, written_during_switch):
    """Killed after the switch (the row points at the new, verified copy) and before the
    old copy is released: the next worker's start completes the move instead of calling it
    failed: the old copy is released, or kept (and named) if it was written meanwhile."""
    from services.tiering import moves

    path, before = flash_and_capacity(api, "300M", 3)
    empty_cap = subvolumes("cap")
    record = TierMove.objects.create(kind="filesystem", name="big", from_pool="flash",
                                     to_pool="cap")
    release = moves.delete_if_present

    def killed_before_release(drv, pool, kind, name):
        if (pool, name) == ("flash", "big"):
            if written_during_switch:
                write_files(path, {"late": b"written to the old copy during the switch"})
            raise Killed()
        return release(drv, pool, kind, name)

    monkeypatch.setattr(moves, "delete_if_present", killed_before_release)
    with pytest.raises(Killed):
        moves.move(record)
    monkeypatch.undo()
    fs = FileSystem.objects.get(name="big")
    assert fs.pool.name == "cap" and file_hashes(fs.path) == before
    assert TierMove.objects.get(pk=record.pk).state == "running" and os.path.isdir(path)

    # the next worker's start fails nothing; it queues the completion (which reads both
    # copies: not during start-up), and the queued task completes the move
    fs = FileSystem.objects.get(name="big")
    write_files(fs.path, {"new-after-switch": b"a client of the moved copy"})  # not a reason
    queued = []
    assert moves.fail_interrupted(finish=queued.append) == 0
    assert queued == [record.pk] and TierMove.objects.get(pk=record.pk).state == "running"
    moves.complete_switched(record.pk)
    done = TierMove.objects.get(pk=record.pk)
    assert done.state == "done" and done.tag == "", (done.state, done.error)
    after = file_hashes(fs.path)
    assert after.pop("new-after-switch") and after == before
    assert subvolumes("cap") == sorted(empty_cap + ["fs/big"]), subvolumes("cap")
    if written_during_switch:
        assert f"kept at {path}" in done.error, done.error
        assert open(os.path.join(path, "late"), "rb").read().startswith(b"written")
        assert subvolumes("flash") == ["fs/big"]  # the kept copy, without move snapshots
    else:
        assert "released" in done.error and not os.path.exists(path), done.error
        assert subvolumes("flash") == []
