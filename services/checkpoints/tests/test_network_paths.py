"""`POST .../versions/` answers the version's directory as seen through the job file
system's NFS export (`nfs_path`) and SMB share (`smb_path`), and the answer is usable:
with ganesha.nfsd and smbd started as `strata up` starts them, a shard written by nfs-rs at
`nfs_path` and read back by smbclient at `smb_path` is the one the commit verifies. Without
an export or share the keys are absent. The SDK's `Version` has both as fields (None when
absent)."""
import hashlib
import os
import shutil
import subprocess

import pytest

from services.checkpoints.sdk import CheckpointClient
from services.checkpoints.tests.conftest import begin, commit

pytestmark = [pytest.mark.root]
MiB = 1 << 20


@pytest.fixture
def daemons(api, data_dir, settings):
    from services.file.tests.plane_support import plane_daemons

    for name in ("ganesha.nfsd", "smbd", "smbclient", "testparm", "smbcontrol", "pdbedit"):
        if not shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            pytest.skip(f"{name} is not installed")
    pytest.importorskip("nfs_rs")
    with plane_daemons(data_dir, settings) as running:
        yield running


def test_version_paths_through_nfs_and_smb(api, daemons, settings, tmp_path, live_server):
    from services.file.tests.nfs_client import connect, write_file
    from services.file.tests.plane_support import drop_unix_user, make_filesystem, new_user_name

    sdk = CheckpointClient(live_server.url, api.token)

    make_filesystem(api, "train")
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "filesystem": "train"},
                 format="json")
    assert r.status_code == 201, r.json()
    v1 = begin(api, "llm", 1)
    assert "nfs_path" not in v1 and "smb_path" not in v1  # not exported, not shared
    got = sdk.version("llm", v1["id"])
    assert (got.nfs_path, got.smb_path) == (None, None)

    user, password = new_user_name(), "Strata-pw-1"
    try:
        r = api.post("/api/v1/nfs-exports/", {"filesystem": "train", "pseudo": "/train",
                                              "clients": ["127.0.0.1 rw no_root_squash"]},
                     format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.json()
        r = api.post("/api/v1/smb-users/", {"username": user, "password": password},
                     format="json")
        assert r.status_code == 201, r.json()
        # the share is the job's directory, not the file system's root
        r = api.post("/api/v1/smb-shares/", {"name": "ckpt", "filesystem": "train",
                                             "path": "llm", "valid_users": [user]},
                     format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.json()

        v2 = begin(api, "llm", 2)
        assert v2["nfs_path"] == "127.0.0.1:/train/llm/step-2"
        assert v2["smb_path"] == "\\\\127.0.0.1\\ckpt\\step-2"
        got = api.get(f"/api/v1/checkpoint-jobs/llm/versions/{v2['id']}/").json()
        assert (got["nfs_path"], got["smb_path"]) == (v2["nfs_path"], v2["smb_path"])
        # the SDK's Version has them as fields
        got = sdk.version("llm", v2["id"])
        assert (got.nfs_path, got.smb_path) == (v2["nfs_path"], v2["smb_path"])
        v3 = sdk.begin("llm", 3)
        assert v3.nfs_path == "127.0.0.1:/train/llm/step-3"
        assert v3.smb_path == "\\\\127.0.0.1\\ckpt\\step-3"
        listed = api.get("/api/v1/checkpoint-jobs/llm/versions/").json()["results"]
        assert all("nfs_path" not in v for v in listed)  # the list stays one query

        # a rank writes its shard at nfs_path (host:/pseudo/rel) over NFSv4.1
        host, path = v2["nfs_path"].split(":", 1)
        assert host == "127.0.0.1"
        data = os.urandom(3 * MiB)
        with connect(settings.SERVICE_OPTIONS["nfs_port"], "/train") as nfs:
            write_file(nfs, path[len("/train/"):] + "/rank0.bin", data)
        # a reader on Windows-style paths gets it back at smb_path (\\host\share\rel)
        _, _, host, share, rel = v2["smb_path"].split("\\", 4)
        local = tmp_path / "rank0.bin"
        done = subprocess.run(
            ["smbclient", f"//{host}/{share}", "-p", str(settings.SERVICE_OPTIONS["smb_port"]),
             "-U", f"{user}%{password}", "-m", "SMB3", "-c", f"get {rel}\\rank0.bin {local}"],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert local.read_bytes() == data

        r = commit(api, "llm", v2, [{"name": "rank0.bin", "size": len(data),
                                     "sha256": hashlib.sha256(data).hexdigest()}])
        assert r.status_code == 200 and r.json()["state"] == "committed", r.json()
        assert r.json()["nfs_path"] == v2["nfs_path"]
    finally:
        sdk.close()
        for url in ("/api/v1/smb-shares/ckpt/", f"/api/v1/smb-users/{user}/"):
            api.delete(url)
        drop_unix_user(user)
