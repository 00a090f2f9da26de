"""The file service through the REST API, with ganesha.nfsd and smbd started as `strata up`
starts them (``services.file.up``) at free ports, and real clients (nfs-rs, smbclient)."""
from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from services.file.tests.plane_support import (
    django_configured,
    drop_unix_user,
    make_filesystem,
    new_user_name,
    plane_daemons,
)

if not django_configured():
    pytest.skip("the file plane tests need pytest-django (run without -p no:django)",
                allow_module_level=True)

nfs_rs = pytest.importorskip("nfs_rs")
MiB = 1024 * 1024
RW = ["127.0.0.1 rw no_root_squash"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (useradd, ports, mounts)")


@pytest.fixture
def daemons(api, data_dir, settings):
    for name in ("ganesha.nfsd", "smbd", "smbclient", "testparm", "smbcontrol", "pdbedit"):
        if not shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            pytest.skip(f"{name} is not installed")
    with plane_daemons(data_dir, settings) as running:
        yield running


def nfs_port(settings) -> int:
    return settings.SERVICE_OPTIONS["nfs_port"]


def smbclient(settings, share, user, password, command):
    return subprocess.run(
        ["smbclient", f"//127.0.0.1/{share}", "-p", str(settings.SERVICE_OPTIONS["smb_port"]),
         "-U", f"{user}%{password}", "-m", "SMB3", "-c", command],
        check=False, capture_output=True, text=True, timeout=120)


def test_nfs_export_through_rest_read_only_export_and_two_exports_of_one_fs(
        api, daemons, settings):
    fs = make_filesystem(api, "fs1")
    made = api.post("/api/v1/nfs-exports/", {"filesystem": "fs1", "clients": RW}, format="json")
    assert made.status_code == 201, made.content
    export = made.json()
    assert (export["pseudo"], export["state"], export["error"]) == ("/fs1", "online", "")
    assert export["clients"][0] == {"address": "127.0.0.1", "access": "rw",
                                    "squash": "no_root_squash", "anonymous_uid": 65534,
                                    "anonymous_gid": 65534}
    # a single host: one entry, this host, and the Linux mount command through it
    port = nfs_port(settings)
    assert [(e["address"], e["port"], e["state"]) for e in export["entries"]] == [
        ("127.0.0.1", port, "up")]
    assert export["mount"]["linux"] == (f"mount -t nfs -o vers=4.1,nconnect=4,port={port} "
                                        "127.0.0.1:/fs1 /mnt/fs1")
    ro = api.post("/api/v1/nfs-exports/", {"filesystem": "fs1", "pseudo": "/fs1-ro",
                                          "clients": [{"address": "127.0.0.1", "access": "ro"}]},
                  format="json")
    assert ro.status_code == 201 and ro.json()["state"] == "online", ro.content

    data = os.urandom(16 * MiB)
    with connect(nfs_port(settings), "/fs1") as client:
        client.mkdir("ckpt")
        write_file(client, "ckpt/shard-0", data)
        assert read_hash(client, "ckpt/shard-0") == (len(data), sha(data))
    assert sha(Path(fs["path"], "ckpt", "shard-0").read_bytes()) == sha(data)
    with connect(nfs_port(settings), "/fs1-ro") as client:
        assert read_hash(client, "ckpt/shard-0") == (len(data), sha(data))
        with pytest.raises(nfs_rs.NfsError, match="read-only"):
            write_file(client, "ckpt/refused", b"x" * 1000)
    assert not Path(fs["path"], "ckpt", "refused").exists()

    # the rules can change on a live export; removing an export stops serving it
    changed = api.patch(f"/api/v1/nfs-exports/{ro.json()['id']}/",
                        {"clients": ["127.0.0.1 ro all_squash"]}, format="json")
    assert changed.status_code == 200 and changed.json()["state"] == "online", changed.content
    assert api.delete(f"/api/v1/nfs-exports/{ro.json()['id']}/").status_code == 204
    with pytest.raises(Exception), connect(nfs_port(settings), "/fs1-ro") as client:  # noqa: B017
        read_hash(client, "ckpt/shard-0")   # nfs-rs raises OSError or NfsError
    listed = api.get("/api/v1/nfs-exports/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [r["pseudo"] for r in rows] == ["/fs1"]


def test_refused_exports_and_shares_and_exported_filesystem_delete(api, daemons, tmp_path):
    fs = make_filesystem(api, "fs1")
    make_filesystem(api, "gone")
    gone_path = api.get("/api/v1/filesystems/gone/").json()["path"]
    assert api.delete("/api/v1/filesystems/gone/").status_code == 204

    post = lambda url, body: api.post(url, body, format="json")
    r = post("/api/v1/nfs-exports/", {"filesystem": "gone", "clients": RW})
    assert r.status_code == 400 and "gone does not exist" in r.json()["detail"], r.content
    r = post("/api/v1/smb-shares/", {"name": "gone", "filesystem": "gone"})
    assert r.status_code == 400 and "gone does not exist" in r.json()["detail"], r.content
    assert not os.path.exists(gone_path)

    os.symlink(str(tmp_path), os.path.join(fs["path"], "escape"))
    for path in ("../", "escape", "/etc"):
        r = post("/api/v1/nfs-exports/", {"filesystem": "fs1", "path": path, "clients": RW})
        assert r.status_code == 400 and "outside the file system" in r.json()["detail"], r.content
        r = post("/api/v1/smb-shares/", {"name": "s1", "filesystem": "fs1", "path": path})
        assert r.status_code == 400 and "outside the file system" in r.json()["detail"], r.content
    r = post("/api/v1/nfs-exports/", {"filesystem": "fs1", "path": "nope", "clients": RW})
    assert r.status_code == 400 and "does not exist" in r.json()["detail"], r.content
    r = post("/api/v1/nfs-exports/", {"filesystem": "fs1", "clients": ["10.0.0.300 rw"]})
    assert r.status_code == 400 and "not an IP address" in r.json()["detail"], r.content
    r = post("/api/v1/nfs-exports/", {"filesystem": "fs1", "clients": []})
    assert r.status_code == 400, r.content
    assert api.get("/api/v1/nfs-exports/").json() in ([], {"count": 0, "next": None,
                                                         "previous": None, "results": []})

    # a file system that is exported or shared cannot be deleted (409), and stays whole
    exp = post("/api/v1/nfs-exports/", {"filesystem": "fs1", "clients": RW})
    assert exp.status_code == 201, exp.content
    share = post("/api/v1/smb-shares/", {"name": "fs1", "filesystem": "fs1"})
    assert share.status_code == 201 and share.json()["state"] == "online", share.content
    Path(fs["path"], "keep").write_bytes(b"kept")
    r = api.delete("/api/v1/filesystems/fs1/")
    assert r.status_code == 409, r.content
    assert r.json()["error"] == "conflict"
    assert "NFS export /fs1" in r.json()["detail"] and "SMB share fs1" in r.json()["detail"]
    assert Path(fs["path"], "keep").read_bytes() == b"kept"
    assert api.get("/api/v1/filesystems/fs1/").status_code == 200
    r = post("/api/v1/smb-shares/", {"name": "FS1", "filesystem": "fs1"})
    assert r.status_code == 400 and "ignore case" in r.json()["detail"], r.content
    # a file system whose directory vanished behind the plane cannot be exported
    vanished = make_filesystem(api, "vanished")
    shutil.rmtree(vanished["path"])
    r = post("/api/v1/nfs-exports/", {"filesystem": "vanished", "clients": RW})
    assert r.status_code == 400 and "deleted" in r.json()["detail"], r.content
    assert api.delete(f"/api/v1/nfs-exports/{exp.json()['id']}/").status_code == 204
    assert api.delete("/api/v1/smb-shares/fs1/").status_code == 204
    assert api.delete("/api/v1/filesystems/fs1/").status_code == 204


def test_smb_share_and_user_through_rest(api, daemons, settings, tmp_path):
    fs = make_filesystem(api, "fs1")
    user, other = new_user_name(), new_user_name()
    password = "Strata-pw-1"
    try:
        r = api.post("/api/v1/smb-users/", {"username": user, "password": password},
                     format="json")
        assert r.status_code == 201, r.content
        assert r.json()["state"] == "online" and "password" not in r.json()
        r = api.post("/api/v1/smb-users/", {"username": other, "password": "Other-pw-2"},
                     format="json")
        assert r.status_code == 201, r.content
        r = api.post("/api/v1/smb-users/", {"username": "root", "password": "x"}, format="json")
        assert r.status_code == 409 and "not managed by Strata" in r.json()["detail"], r.content
        r = api.post("/api/v1/smb-shares/", {"name": "ckpt", "filesystem": "fs1",
                                              "valid_users": ["nobody-here"]}, format="json")
        assert r.status_code == 400 and "Unknown SMB user" in r.json()["detail"], r.content

        r = api.post("/api/v1/smb-shares/", {"name": "ckpt", "filesystem": "fs1",
                                              "valid_users": [user], "encrypt": True},
                     format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.content
        r = api.post("/api/v1/smb-shares/", {"name": "ckpt-ro", "filesystem": "fs1",
                                              "read_only": True}, format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.content

        data = os.urandom(8 * MiB)
        local = tmp_path / "up.bin"
        local.write_bytes(data)
        done = smbclient(settings, "ckpt", user, password,
                         f"put {local} shard-0; get shard-0 {tmp_path / 'down.bin'}")
        assert done.returncode == 0, done.stdout + done.stderr
        assert sha((tmp_path / "down.bin").read_bytes()) == sha(data)
        assert sha(Path(fs["path"], "shard-0").read_bytes()) == sha(data)
        # valid users: the other user is refused on ckpt; read-only share refuses writes
        done = smbclient(settings, "ckpt", other, "Other-pw-2", "ls")
        assert done.returncode != 0 and "ACCESS_DENIED" in done.stdout + done.stderr
        done = smbclient(settings, "ckpt-ro", other, "Other-pw-2",
                         f"get shard-0 {tmp_path / 'ro.bin'}; put {local} refused")
        assert "NT_STATUS_ACCESS_DENIED" in done.stdout + done.stderr, done.stdout
        assert sha((tmp_path / "ro.bin").read_bytes()) == sha(data)
        assert not Path(fs["path"], "refused").exists()

        # password change through PATCH; the old one stops working
        r = api.patch(f"/api/v1/smb-users/{user}/", {"password": "New-pw-3"}, format="json")
        assert r.status_code == 200, r.content
        assert smbclient(settings, "ckpt", user, password, "ls").returncode != 0
        assert smbclient(settings, "ckpt", user, "New-pw-3", "ls").returncode == 0
        # a user a share names cannot be deleted
        r = api.delete(f"/api/v1/smb-users/{user}/")
        assert r.status_code == 409 and "ckpt" in r.json()["detail"], r.content
        assert api.delete("/api/v1/smb-shares/ckpt/").status_code == 204
        assert api.delete(f"/api/v1/smb-users/{user}/").status_code == 204
        assert api.delete(f"/api/v1/smb-users/{other}/").status_code == 204
        from services.file.runtime import unix_user_exists
        assert not unix_user_exists(user) and not unix_user_exists(other)
    finally:
        drop_unix_user(user)
        drop_unix_user(other)


@pytest.mark.root
def test_btrfs_snapshots_over_nfs_quota_as_share_size_and_a_refused_export(
        api, daemons, settings, tmp_path):
    """On btrfs: a snapshot shows under .snapshots over NFS (read-only); a share reports the
    quota as its size; an export Ganesha refuses (a nested subvolume that is not a mount
    point) is an error on its row while the old config keeps serving."""
    fs = make_filesystem(api, "fs1", pool="bt", driver="local")
    good = api.post("/api/v1/nfs-exports/", {"filesystem": "fs1", "clients": RW}, format="json")
    assert good.status_code == 201 and good.json()["state"] == "online", good.content
    with connect(nfs_port(settings), "/fs1") as client:
        write_file(client, "before", b"served before")
    snap = api.post("/api/v1/snapshots/", {"filesystem": "fs1", "name": "s1"}, format="json")
    assert snap.status_code == 201, snap.content
    with connect(nfs_port(settings), "/fs1") as client:
        write_file(client, "before", b"changed after the snapshot")
        assert read_hash(client, ".snapshots/s1/before") == (13, sha(b"served before"))
        with pytest.raises(nfs_rs.NfsError):
            write_file(client, ".snapshots/s1/new", b"x")

    user = new_user_name()
    try:
        r = api.post("/api/v1/smb-users/", {"username": user, "password": "Strata-pw-1"},
                     format="json")
        assert r.status_code == 201, r.content
        r = api.post("/api/v1/smb-shares/", {"name": "fs1", "filesystem": "fs1"}, format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.content
        r = api.patch("/api/v1/filesystems/fs1/", {"quota_bytes": 64 * MiB}, format="json")
        assert r.status_code == 200, r.content
        done = smbclient(settings, "fs1", user, "Strata-pw-1", "du")
        assert done.returncode == 0, done.stdout + done.stderr
        blocks, size = re.search(r"(\d+) blocks of size (\d+)", done.stdout).groups()
        assert int(blocks) * int(size) == 64 * MiB, done.stdout
        assert api.delete("/api/v1/smb-shares/fs1/").status_code == 204
        assert api.delete(f"/api/v1/smb-users/{user}/").status_code == 204
    finally:
        drop_unix_user(user)

    subprocess.run(["btrfs", "subvolume", "create", os.path.join(fs["path"], "nested")],
                   check=True, capture_output=True)
    conf = Path(daemons.data_dir, "run", "nfs", "ganesha.conf")
    before = conf.read_text()
    bad = api.post("/api/v1/nfs-exports/", {"filesystem": "fs1", "path": "nested",
                                            "pseudo": "/nested", "clients": RW}, format="json")
    assert bad.status_code in (400, 503), bad.content
    assert bad.json()["error"] == "apply_failed", bad.content
    assert "saved but not applied" in bad.json()["detail"]
    rows = {r["pseudo"]: r for r in _rows(api.get("/api/v1/nfs-exports/").json())}
    assert rows["/nested"]["state"] == "error" and rows["/nested"]["error"], rows
    assert rows["/fs1"]["state"] == "online"
    assert conf.read_text() == before
    with connect(nfs_port(settings), "/fs1") as client:
        assert read_hash(client, "before") == (26, sha(b"changed after the snapshot"))
        write_file(client, "after", b"still served")
    # a later good change goes through although the refused row is still there
    changed = api.patch(f"/api/v1/nfs-exports/{good.json()['id']}/",
                        {"clients": RW + ["10.9.9.0/24 ro"]}, format="json")
    assert changed.status_code == 200 and changed.json()["state"] == "online", changed.content
    nested_id = rows["/nested"]["id"]
    assert api.get(f"/api/v1/nfs-exports/{nested_id}/").json()["state"] == "error"
    assert api.delete(f"/api/v1/nfs-exports/{nested_id}/").status_code == 204
    # a snapshot served over NFS is released from Ganesha before the dataplane deletes it
    assert api.delete(f"/api/v1/snapshots/{snap.json()['id']}/").status_code == 204
    assert api.delete(f"/api/v1/nfs-exports/{good.json()['id']}/").status_code == 204
    subprocess.run(["btrfs", "subvolume", "delete", os.path.join(fs["path"], "nested")],
                   check=True, capture_output=True)
    assert api.delete("/api/v1/filesystems/fs1/").status_code == 204


def _rows(body):
    return body["results"] if isinstance(body, dict) else body


def test_a_share_is_writable_by_the_user_its_file_system_belongs_to(api, daemons, settings,
                                                                     tmp_path):
    make_filesystem(api, "scratch")  # the pool
    user = new_user_name()
    try:
        r = api.post("/api/v1/smb-users/", {"username": user, "password": "Strata-pw-1"},
                     format="json")
        assert r.status_code == 201, r.content
        made = api.post("/api/v1/filesystems/", {"name": "theirs", "pool": "p1",
                                                "owner": user, "mode": "0750"}, format="json")
        assert made.status_code == 201, made.content
        api.post("/api/v1/filesystems/", {"name": "roots", "pool": "p1"}, format="json")
        for share in ("theirs", "roots"):
            r = api.post("/api/v1/smb-shares/", {"name": share, "filesystem": share,
                                                  "valid_users": [user]}, format="json")
            assert r.status_code == 201, r.content
        local = tmp_path / "shard.bin"
        local.write_bytes(os.urandom(MiB))
        done = smbclient(settings, "theirs", user, "Strata-pw-1", f"put {local} shard")
        assert done.returncode == 0, done.stdout + done.stderr
        assert Path(made.json()["path"], "shard").read_bytes() == local.read_bytes()
        # a file system nobody gave the user stays root's (0755): the user cannot write
        done = smbclient(settings, "roots", user, "Strata-pw-1", f"put {local} shard")
        assert "NT_STATUS_ACCESS_DENIED" in done.stdout + done.stderr, done.stdout
        # the operator gives it to the user later: then the user can
        r = api.patch("/api/v1/filesystems/roots/", {"owner": user, "mode": "0700"},
                      format="json")
        assert r.status_code == 200 and r.json()["owner"] == user, r.content
        done = smbclient(settings, "roots", user, "Strata-pw-1", f"put {local} shard")
        assert done.returncode == 0, done.stdout + done.stderr
        r = api.patch("/api/v1/filesystems/roots/", {"owner": "no-such-user-x"}, format="json")
        assert r.status_code == 400 and "owner" in r.json()["fields"], r.content
        for share in ("theirs", "roots"):
            assert api.delete(f"/api/v1/smb-shares/{share}/").status_code == 204
        assert api.delete(f"/api/v1/smb-users/{user}/").status_code == 204
    finally:
        drop_unix_user(user)


def test_root_squashed_clients_write_where_the_operator_meant(api, daemons, settings):
    """A client that is root, squashed, writes as the rule's anonymous ids: into a file system
    that belongs to them (the default nobody, or the owner the rule names), never into one
    that is root's."""
    make_filesystem(api, "scratch")  # the pool
    nobody, daemon = pwd.getpwnam("nobody"), pwd.getpwnam("daemon")
    layouts = {"roots": {}, "nobodys": {"owner": "nobody", "group": str(nobody.pw_gid)},
               "daemons": {"owner": "daemon", "group": "daemon", "mode": "0750"}}
    paths = {}
    for name, access in layouts.items():
        made = api.post("/api/v1/filesystems/", {"name": name, "pool": "p1", **access},
                        format="json")
        assert made.status_code == 201, made.content
        paths[name] = made.json()["path"]
    rules = {"roots": "127.0.0.1 rw root_squash", "nobodys": "127.0.0.1 rw root_squash",
             "daemons": "127.0.0.1 rw root_squash anonuid=daemon anongid=daemon"}
    for name, rule in rules.items():
        made = api.post("/api/v1/nfs-exports/", {"filesystem": name, "clients": [rule]},
                        format="json")
        assert made.status_code == 201 and made.json()["state"] == "online", made.content
    assert made.json()["clients"][0]["anonymous_uid"] == daemon.pw_uid

    def write_as_root(name: str) -> None:
        url = f"nfs://127.0.0.1:{nfs_port(settings)}/{name}?version=4.1"
        with nfs_rs.Client.connect(url, uid=0, gid=0, connect_timeout=10,
                                   operation_timeout=60) as client:
            write_file(client, "from-root.bin", b"r" * MiB)

    with pytest.raises(nfs_rs.NfsError) as refused:
        write_as_root("roots")
    assert "ACCES" in str(refused.value).upper() or "PERM" in str(refused.value).upper()
    for name, owner in (("nobodys", nobody.pw_uid), ("daemons", daemon.pw_uid)):
        write_as_root(name)
        written = Path(paths[name], "from-root.bin")
        assert written.read_bytes() == b"r" * MiB
        assert written.stat().st_uid == owner  # squashed: it is not root's file
    bad = api.post("/api/v1/nfs-exports/", {"filesystem": "roots", "pseudo": "/bad",
                                           "clients": ["127.0.0.1 rw root_squash anonuid=nosuchuserx"]},
                   format="json")
    assert bad.status_code == 400 and "nosuchuserx" in bad.json()["detail"], bad.content


def test_a_share_for_named_users_grants_them_access(api, daemons, settings, tmp_path):
    """`grant_access` on a share of a root-owned 0755 file system: its valid user writes there
    (and into directories it makes); the root stays root's; without users it is refused."""
    make_filesystem(api, "scratch")  # the pool
    user = new_user_name()
    try:
        r = api.post("/api/v1/smb-users/", {"username": user, "password": "Strata-pw-1"},
                     format="json")
        assert r.status_code == 201, r.content
        fs = api.post("/api/v1/filesystems/", {"name": "team", "pool": "p1"}, format="json")
        assert fs.status_code == 201, fs.content
        root = Path(fs.json()["path"])
        r = api.post("/api/v1/smb-shares/", {"name": "team", "filesystem": "team",
                                              "valid_users": [user], "grant_access": True},
                     format="json")
        assert r.status_code == 201 and "grant_access" not in r.json(), r.content
        local = tmp_path / "shard.bin"
        local.write_bytes(os.urandom(MiB))
        done = smbclient(settings, "team", user, "Strata-pw-1",
                         f"put {local} shard; mkdir step-1; put {local} step-1/shard")
        assert done.returncode == 0 and "NT_STATUS" not in done.stdout, done.stdout + done.stderr
        for written in (root / "shard", root / "step-1" / "shard"):
            assert written.read_bytes() == local.read_bytes()
            assert written.stat().st_uid == pwd.getpwnam(user).pw_uid
        assert root.stat().st_uid == 0  # the file system's owner did not change

        r = api.post("/api/v1/smb-shares/", {"name": "nobody-named", "filesystem": "team",
                                              "grant_access": True}, format="json")
        assert r.status_code == 400 and "grant_access" in r.json()["fields"], r.content
        assert api.delete("/api/v1/smb-shares/team/").status_code == 204
        assert api.delete(f"/api/v1/smb-users/{user}/").status_code == 204
    finally:
        drop_unix_user(user)
