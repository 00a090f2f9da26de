"""Tier moves on real btrfs pools: a file system and a volume move from a flash pool to a
capacity pool keeping their names, with the bytes equal by hash and the hot copy released;
moves that would lose history are refused."""
import os

import pytest

from services.protection.tests.helpers import file_hashes, write_files
from services.storage.drivers import driver_for
from services.storage.models import FileSystem, Volume
from services.tiering.models import TierMove
from tests.kit import run_job

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


def test_move_filesystem_and_volume_to_capacity(api, worker):
    for name, media in (("flash", "flash"), ("cap", "capacity")):
        r = api.post("/api/v1/pools/", {"name": name, "driver": "local", "media": media,
                                        "devices": ["image:400M"]}, format="json")
        assert r.status_code == 201, r.json()
    r = api.put("/api/v1/io-budget/1/", {"rate_mbps": 0, "burst_mb": 0,
                                         "class_rates_mbps": {"migration": 500},
                                         "foreground_share": 0.2}, format="json")
    assert r.status_code == 200 and r.json()["class_rates_mbps"] == {"migration": 500}, r.json()

    fs = api.post("/api/v1/filesystems/", {"name": "old-ckpt", "pool": "flash"},
                  format="json").json()
    write_files(fs["path"], {"step-100/shard-0": os.urandom(4 * MiB),
                             "step-100/manifest.json": b"{}"})
    before = file_hashes(fs["path"])

    # refused while it has a snapshot (its history would be lost)
    snap = api.post("/api/v1/snapshots/", {"name": "s1", "filesystem": "old-ckpt"},
                    format="json").json()
    r = api.post("/api/v1/tier-moves/", {"filesystem": "old-ckpt", "pool": "cap"},
                 format="json")
    assert r.status_code == 409 and "snapshots" in r.json()["detail"]
    assert api.delete(f"/api/v1/snapshots/{snap['id']}/").status_code == 204

    job = run_job(api, "/api/v1/tier-moves/", {"filesystem": "old-ckpt", "pool": "cap"})
    assert job["state"] == "succeeded", job
    moved = FileSystem.objects.get(name="old-ckpt")
    assert moved.pool.name == "cap" and moved.path != fs["path"]
    assert file_hashes(moved.path) == before
    assert not os.path.exists(fs["path"])  # the hot copy is released
    drv = driver_for("local")
    assert drv.list_filesystems("flash") == [] and drv.list_filesystems("cap") == ["old-ckpt"]
    assert moved.snapshots.count() == 0
    record = TierMove.objects.get(name="old-ckpt")
    assert record.state == "done" and record.bytes_moved >= 4 * MiB and record.tree_sha256
    # it is an ordinary file system in its new pool
    write_files(moved.path, {"after-move": b"ok"})

    vol = api.post("/api/v1/volumes/", {"name": "vm", "pool": "flash", "size_bytes": 32 * MiB},
                   format="json").json()
    with open(vol["path"], "r+b") as fh:
        fh.seek(MiB)
        fh.write(os.urandom(2 * MiB))
    with open(vol["path"], "rb") as fh:
        vol_before = fh.read()
    job = run_job(api, "/api/v1/tier-moves/", {"volume": "vm", "pool": "cap"})
    assert job["state"] == "succeeded", job
    moved = Volume.objects.get(name="vm")
    assert moved.pool.name == "cap" and moved.size_bytes == 32 * MiB
    with open(moved.path, "rb") as fh:
        assert fh.read() == vol_before
    assert drv.list_volumes("flash") == []

    r = api.post("/api/v1/tier-moves/", {"volume": "vm", "pool": "cap"}, format="json")
    assert r.status_code == 409 and "already in pool" in r.json()["detail"]
