"""End to end: a real `strata up` (tests/appliance.py) serves an NFS export created through the
CLI and REST to nfs-rs, and serves it again after a restart (the bootstrap reconciles it)."""
from __future__ import annotations

import contextlib
import json
import os
import urllib.request

import pytest

from services.file.tests.nfs_client import connect, read_hash, sha, write_file

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
def test_export_through_cli_and_rest_reachable_by_nfs_rs_and_after_restart(appliance):
    app = appliance.start()
    assert app.credentials["nfs_port"] == app.nfs_port
    assert app.credentials["smb_port"] == app.smb_port
    done = app.cli("fs", "create", "ckpt")
    assert done.returncode == 0, done.stdout + done.stderr
    status, export = rest(app, "POST", "nfs-exports/",
                          {"filesystem": "ckpt", "clients": ["127.0.0.1 rw no_root_squash"]})
    assert status == 201 and export["state"] == "online", export
    data = os.urandom(8 * MiB)
    with connect(app.nfs_port, "/ckpt") as client:
        client.mkdir("step-100")
        write_file(client, "step-100/shard-0", data)
        assert read_hash(client, "step-100/shard-0") == (len(data), sha(data))

    out = app.stop()
    assert "Strata stopped." in out, out
    app.start()
    status, again = rest(app, "GET", f"nfs-exports/{export['id']}/")
    assert status == 200 and again["state"] == "online", again
    with connect(app.nfs_port, "/ckpt") as client:
        assert read_hash(client, "step-100/shard-0") == (len(data), sha(data))
    status, body = rest(app, "DELETE", "filesystems/ckpt/")
    assert status == 409 and "NFS export /ckpt" in body["detail"], body
