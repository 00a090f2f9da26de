"""End to end: a real `strata up` (tests/appliance.py) serves an NFS export created through the
CLI to nfs-rs and an SMB share to smbclient, and serves the export again after a restart (the
bootstrap reconciles it into the fresh daemons)."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import urllib.request

import pytest

from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from services.file.tests.plane_support import drop_unix_user, new_user_name

nfs_rs = pytest.importorskip("nfs_rs")
MiB = 1024 * 1024


def rest(app, method: str, path: str, body=None):
    creds = app.credentials
    req = urllib.request.Request(
        creds["api_url"] + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Token {creds['token']}",
                 "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture
def appliance():
    from services.file.daemons import nfs_server
    from tests.appliance import Appliance

    app = Appliance()
    try:
        yield app
    finally:
        if app.proc and app.proc.poll() is None:
            with contextlib.suppress(Exception):   # destroy below kills it
                app.stop()
        # safety net if strata up died: its btrfs binds would keep the pool mounted
        nfs_server(app.data_dir, {}).unbind_all()
        app.destroy()


@pytest.mark.root
def test_export_through_cli_and_rest_reachable_by_nfs_rs_and_after_restart(appliance, tmp_path):
    app = appliance.start()
    assert app.credentials["nfs_port"] == app.nfs_port
    assert app.credentials["smb_port"] == app.smb_port
    done = app.cli("fs", "create", "ckpt")
    assert done.returncode == 0, done.stdout + done.stderr
    done = app.cli("--json", "nfs-export", "create", "ckpt", "--client",
                   "127.0.0.1 rw no_root_squash")
    assert done.returncode == 0, done.stdout + done.stderr
    export = json.loads(done.stdout)
    assert export["state"] == "online" and export["pseudo"] == "/ckpt", export
    data = os.urandom(8 * MiB)
    with connect(app.nfs_port, "/ckpt") as client:
        client.mkdir("step-100")
        write_file(client, "step-100/shard-0", data)
        assert read_hash(client, "step-100/shard-0") == (len(data), sha(data))

    # SMB through the CLI: a user (a Unix account kept by Strata) and a share of the same fs
    user = new_user_name()
    try:
        done = app.cli("smb-user", "create", user, "--password", "Strata-pw-1")
        assert done.returncode == 0, done.stdout + done.stderr
        done = app.cli("smb-share", "create", "ckpt", "ckpt", "--valid-user", user)
        assert done.returncode != 0 and "not searchable by them" in done.stderr, done
        os.chmod(app.data_dir, 0o755)    # mkdtemp made it 0700: SMB users could not reach in
        done = app.cli("smb-share", "create", "ckpt", "ckpt", "--valid-user", user)
        assert done.returncode == 0, done.stdout + done.stderr
        got = tmp_path / "shard-0"
        done = subprocess.run(
            ["smbclient", "//127.0.0.1/ckpt", "-p", str(app.smb_port), "-U",
             f"{user}%Strata-pw-1", "-m", "SMB3", "-c", f"get step-100/shard-0 {got}"],
            check=False, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert sha(got.read_bytes()) == sha(data)
        assert app.cli("smb-share", "delete", "ckpt").returncode == 0
        assert app.cli("smb-user", "delete", user).returncode == 0
    finally:
        drop_unix_user(user)

    out = app.stop()
    assert "Strata stopped." in out, out
    app.start()
    status, again = rest(app, "GET", f"nfs-exports/{export['id']}/")
    assert status == 200 and again["state"] == "online", again
    with connect(app.nfs_port, "/ckpt") as client:
        assert read_hash(client, "step-100/shard-0") == (len(data), sha(data))
    status, body = rest(app, "DELETE", "filesystems/ckpt/")
    assert status == 409 and "NFS export /ckpt" in body["detail"], body
