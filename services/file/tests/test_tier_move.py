"""A file system that moves to another pool (a tier move) stays served under the same NFS
pseudo path and SMB share name: files written before the move read back byte for byte
through the same export and share, and new ones can be written, with ganesha.nfsd and smbd
started as `strata up` starts them and real clients (nfs-rs, smbprotocol)."""
from __future__ import annotations

import os
import shutil

import pytest

from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from services.file.tests.plane_support import (
    django_configured,
    drop_unix_user,
    make_filesystem,
    new_user_name,
    plane_daemons,
)
from services.file.tests.smb_client import SmbProtocolClient

if not django_configured():
    pytest.skip("the file plane tests need pytest-django (run without -p no:django)",
                allow_module_level=True)

nfs_rs = pytest.importorskip("nfs_rs")
pytest.importorskip("smbclient")
MiB = 1024 * 1024
RW = ["127.0.0.1 rw no_root_squash"]

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts, useradd)")]


class _Smb:
    """What SmbProtocolClient needs of a server: its port."""

    def __init__(self, port):
        self.settings = type("S", (), {"port": port})()


@pytest.fixture
def daemons(api, data_dir, settings):
    for name in ("ganesha.nfsd", "smbd", "testparm", "smbcontrol", "pdbedit", "btrfs"):
        if not shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            pytest.skip(f"{name} is not installed")
    with plane_daemons(data_dir, settings) as running:
        yield running


def test_exports_and_shares_follow_a_moved_filesystem(api, daemons, worker, settings):
    from tests.kit import run_job
    from services.file.models import NfsExport, SmbShare
    from services.storage.models import FileSystem

    fs = make_filesystem(api, "ckpt", pool="flash", driver="local")
    r = api.post("/api/v1/pools/", {"name": "cap", "driver": "local", "media": "capacity",
                                    "devices": ["image:512M"]}, format="json")
    assert r.status_code == 201, r.content
    os.chmod(r.json()["mountpoint"], 0o755)
    r = api.post("/api/v1/nfs-exports/", {"filesystem": "ckpt", "clients": RW}, format="json")
    assert r.status_code == 201 and r.json()["state"] == "online", r.content
    export = r.json()
    user, password = new_user_name(), "Strata-pw-1"
    port = settings.SERVICE_OPTIONS
    try:
        r = api.post("/api/v1/smb-users/", {"username": user, "password": password},
                     format="json")
        assert r.status_code == 201, r.content
        r = api.post("/api/v1/smb-shares/", {"name": "ckpt", "filesystem": "ckpt",
                                              "valid_users": [user]}, format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.content

        over_nfs, over_smb = os.urandom(3 * MiB), os.urandom(2 * MiB)
        with connect(port["nfs_port"], "/ckpt") as client:
            client.mkdir("step-100")
            write_file(client, "step-100/shard-0", over_nfs)
        with SmbProtocolClient(_Smb(port["smb_port"]), user, password) as smb:
            smb.write("ckpt", "shard-smb", over_smb)

        job = run_job(api, "/api/v1/tier-moves/", {"filesystem": "ckpt", "pool": "cap"})
        assert job["state"] == "succeeded", job
        moved = FileSystem.objects.get(name="ckpt")
        assert moved.pool.name == "cap" and moved.path != fs["path"]
        assert not os.path.exists(fs["path"])        # the hot copy is released

        # the same pseudo path and share name, now served from the capacity pool
        r = api.get(f"/api/v1/nfs-exports/{export['id']}/").json()
        assert (r["pseudo"], r["state"], r["error"]) == ("/ckpt", "online", ""), r
        r = api.get("/api/v1/smb-shares/ckpt/").json()
        assert (r["name"], r["state"], r["error"]) == ("ckpt", "online", ""), r
        for row in (NfsExport.objects.get(), SmbShare.objects.get()):
            assert row.applied["path"] == os.path.realpath(moved.path), row.applied
        with connect(port["nfs_port"], "/ckpt") as client:
            assert read_hash(client, "step-100/shard-0") == (len(over_nfs), sha(over_nfs))
            assert read_hash(client, "shard-smb") == (len(over_smb), sha(over_smb))
            client.mkdir("step-200")
            write_file(client, "step-200/shard-0", b"after the move, over NFS")
        with SmbProtocolClient(_Smb(port["smb_port"]), user, password) as smb:
            assert smb.read_hash("ckpt", "step-100/shard-0") == (len(over_nfs), sha(over_nfs))
            smb.write("ckpt", "after-smb", b"after the move, over SMB")
        with open(os.path.join(moved.path, "step-200", "shard-0"), "rb") as fh:
            assert fh.read() == b"after the move, over NFS"
        with open(os.path.join(moved.path, "after-smb"), "rb") as fh:
            assert fh.read() == b"after the move, over SMB"

        assert api.delete("/api/v1/smb-shares/ckpt/").status_code == 204
        assert api.delete(f"/api/v1/smb-users/{user}/").status_code == 204
        assert api.delete(f"/api/v1/nfs-exports/{export['id']}/").status_code == 204
        assert api.delete("/api/v1/filesystems/ckpt/").status_code == 204
    finally:
        drop_unix_user(user)


def test_a_move_whose_exports_cannot_follow_leaves_the_filesystem_served_where_it_was(
        api, daemons, worker, settings):
    """When a service that serves the file system refuses the new path, the move fails, the
    row and the NFS export point at the old copy again and the new copy is dropped."""
    from tests.kit import run_job
    from services.storage.drivers import driver_for
    from services.storage.models import FileSystem
    from services.tiering.signals import moved

    fs = make_filesystem(api, "ckpt", pool="flash", driver="local")
    r = api.post("/api/v1/pools/", {"name": "cap", "driver": "local", "media": "capacity",
                                    "devices": ["image:512M"]}, format="json")
    assert r.status_code == 201, r.content
    r = api.post("/api/v1/nfs-exports/", {"filesystem": "ckpt", "clients": RW}, format="json")
    assert r.status_code == 201 and r.json()["state"] == "online", r.content
    data = os.urandom(MiB)
    with connect(settings.SERVICE_OPTIONS["nfs_port"], "/ckpt") as client:
        write_file(client, "shard-0", data)

    def refuse(sender, instance, **kwargs):   # another service that cannot follow
        if instance.pool.name == "cap":
            raise RuntimeError("the block service cannot re-point its target")
    moved.connect(refuse, sender=FileSystem)
    try:
        job = run_job(api, "/api/v1/tier-moves/", {"filesystem": "ckpt", "pool": "cap"})
    finally:
        moved.disconnect(refuse, sender=FileSystem)
    assert job["state"] == "failed" and "cannot re-point" in job["error"], job
    row = FileSystem.objects.get(name="ckpt")
    assert (row.pool.name, row.path) == ("flash", fs["path"])
    assert driver_for("local").list_filesystems("cap") == []
    r = api.get("/api/v1/nfs-exports/").json()
    r = r["results"] if isinstance(r, dict) else r
    assert [(e["pseudo"], e["state"]) for e in r] == [("/ckpt", "online")], r
    with connect(settings.SERVICE_OPTIONS["nfs_port"], "/ckpt") as client:
        assert read_hash(client, "shard-0") == (len(data), sha(data))
        write_file(client, "after", b"still served from flash")
    with open(os.path.join(fs["path"], "after"), "rb") as fh:
        assert fh.read() == b"still served from flash"
    assert api.delete(f"/api/v1/nfs-exports/{r[0]['id']}/").status_code == 204
