"""A pool filled to the last byte: S3 PUT gets 507 InsufficientStorage, a checkpoint commit of
the short shards is refused saying the file system is full, NFS and SMB writers get ENOSPC
(nfs-rs, smbclient), what was stored before stays readable, the plane's database and the
gateway's index stay intact; once space is freed every path writes again."""
from __future__ import annotations

import errno
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from services.file.tests.nfs_client import connect, error_codes, read_hash, sha, write_file
from services.file.tests.plane_support import (
    PlaneDaemons,
    django_configured,
    drop_unix_user,
    new_user_name,
)
from services.object import service
from services.object.tests.planefixture import start_plane_gateway, stop_procs
from tests.kit import free_port

if not django_configured():
    pytest.skip("needs pytest-django", allow_module_level=True)
pytest.importorskip("nfs_rs")

pytestmark = [pytest.mark.root, pytest.mark.django_db]
MiB = 1 << 20
PASSWORD = "Strata-pw-1"


def fill(path: Path) -> int:
    """Write a file in ``path`` until the file system refuses a single byte more."""
    written = 0
    with open(path / "filler", "wb", buffering=0) as f:
        for block in (MiB, 64 << 10, 4096, 1):
            chunk = b"\0" * block
            while True:
                try:
                    written += f.write(chunk)
                    os.fsync(f.fileno())
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    return written


def smbput(port: int, user: str, local: Path, name: str) -> str:
    done = subprocess.run(["smbclient", "//127.0.0.1/ckpt", "-p", str(port), "-U",
                           f"{user}%{PASSWORD}", "-m", "SMB3", "-c", f"put {local} {name}"],
                          capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr + f"(exit {done.returncode})"


@pytest.fixture
def appliance_parts(api, data_dir, settings):
    """A small btrfs pool named default, the S3 gateway on it, ganesha.nfsd and smbd."""
    options = {"nfs_port": free_port(), "smb_port": free_port(), "host": "127.0.0.1"}
    os.chmod(data_dir, 0o755)
    gw = start_plane_gateway(api, data_dir, settings, options=options,
                             pool={"driver": "local", "devices": ["image:256M"]})
    daemons = PlaneDaemons(data_dir, settings.SERVICE_OPTIONS)
    try:
        daemons.start()
        yield gw, settings.SERVICE_OPTIONS
    finally:
        daemons.stop()
        stop_procs(gw.procs)


def test_full_pool_refuses_clearly_keeps_what_is_stored_and_recovers(api, appliance_parts,
                                                                      tmp_path):
    gw, options = appliance_parts
    s3 = gw.admin_s3
    user = new_user_name()
    try:
        fs = api.post("/api/v1/filesystems/", {"name": "ckpt", "mode": "0777"}, format="json")
        assert fs.status_code == 201, fs.content
        path = Path(fs.json()["path"])
        r = api.post("/api/v1/nfs-exports/", {"filesystem": "ckpt",
                                              "clients": ["127.0.0.1 rw no_root_squash"]},
                     format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.content
        assert api.post("/api/v1/smb-users/", {"username": user, "password": PASSWORD},
                        format="json").status_code == 201
        r = api.post("/api/v1/smb-shares/", {"name": "ckpt", "filesystem": "ckpt",
                                             "valid_users": [user]}, format="json")
        assert r.status_code == 201, r.content
        r = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "filesystem": "ckpt"},
                     format="json")
        assert r.status_code == 201, r.content
        version = api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": 1},
                           format="json").json()
        s3.create_bucket(Bucket="kept")
        before = os.urandom(MiB)
        s3.put_object(Bucket="kept", Key="before", Body=before)

        filled = fill(path)
        assert filled > 100 * MiB

        # S3: a clear, non-retried error
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket="kept", Key="after", Body=os.urandom(2 * MiB))
        err = refused.value.response
        assert err["Error"]["Code"] == "InsufficientStorage", err
        assert err["ResponseMetadata"]["HTTPStatusCode"] == 507
        # a rank's shard is cut short by ENOSPC; the commit says why it is refused
        shard = os.urandom(4 * MiB)
        with pytest.raises(OSError) as cut, open(Path(version["path"], "rank0.bin"), "wb") as f:
            f.write(shard)
            f.flush()
            os.fsync(f.fileno())
        assert cut.value.errno == errno.ENOSPC
        manifest = {"manifest": [{"name": "rank0.bin", "size": len(shard)}]}
        r = api.post(f"/api/v1/checkpoint-jobs/llm/versions/{version['id']}/commit/", manifest,
                     format="json")
        assert r.status_code == 409 and r.json()["error"] == "incomplete", r.content
        assert "is full" in r.json()["detail"] and "rank0.bin" in r.json()["detail"], r.json()
        # NFS and SMB writers get ENOSPC
        with pytest.raises(Exception) as nfs_refused, connect(options["nfs_port"], "/ckpt") as c:
            write_file(c, "nfs.bin", os.urandom(2 * MiB))
        assert "NOSPC" in error_codes(nfs_refused.value).upper(), error_codes(nfs_refused.value)
        local = tmp_path / "smb.bin"
        local.write_bytes(os.urandom(2 * MiB))
        assert "NT_STATUS_DISK_FULL" in smbput(options["smb_port"], user, local, "smb.bin")
        # what was stored before is intact, and the plane answers
        assert s3.get_object(Bucket="kept", Key="before")["Body"].read() == before
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="kept")["Contents"]] == ["before"]
        assert api.get("/api/v1/buckets/").status_code == 200

        # space freed: every path writes again
        os.remove(path / "filler")
        subprocess.run(["btrfs", "filesystem", "sync", str(path)], check=True)
        s3.put_object(Bucket="kept", Key="after", Body=b"a" * MiB)
        assert s3.get_object(Bucket="kept", Key="after")["Body"].read() == b"a" * MiB
        data = os.urandom(2 * MiB)
        with connect(options["nfs_port"], "/ckpt") as c:
            write_file(c, "nfs.bin", data)
            assert read_hash(c, "nfs.bin") == (len(data), sha(data))
        assert "NT_STATUS" not in smbput(options["smb_port"], user, local, "smb.bin")
        assert Path(path, "smb.bin").read_bytes() == local.read_bytes()
        Path(version["path"], "rank0.bin").write_bytes(shard)
        r = api.post(f"/api/v1/checkpoint-jobs/llm/versions/{version['id']}/commit/", manifest,
                     format="json")
        assert r.status_code == 200 and r.json()["state"] == "committed", r.content
        # the gateway's index is a sound SQLite database after all this
        index = sorted(Path(service.data_root(service.gateway())).rglob("shard-*.db"))
        assert index
        for db in index:
            with sqlite3.connect(db) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",), db
    finally:
        for share in ("ckpt",):
            api.delete(f"/api/v1/smb-shares/{share}/")
        api.delete(f"/api/v1/smb-users/{user}/")
        drop_unix_user(user)
