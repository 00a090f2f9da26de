"""What no API call may do to a file system (issue 34): change one that a service keeps for
its own data (the S3 gateway's), hand a service's data to a local account, or leave a file
system in a state where later calls answer 500."""
import errno
import os
import subprocess
from pathlib import Path

import pytest

from services.storage import bootstrap, service
from services.storage.models import FileSystem, Pool
from services.storage.tests.test_api import make_pool

pytestmark = [pytest.mark.root, pytest.mark.django_db]
MiB = 1 << 20
CHANGES = ({"quota_bytes": 64 * MiB}, {"quota_bytes": 1}, {"owner": "nobody"},
           {"group": "nogroup"}, {"mode": "0777"})


def as_nobody(*argv) -> subprocess.CompletedProcess:
    """Run a command as the local unprivileged account ``nobody``."""
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True,
                          text=True, timeout=30)


def test_a_file_system_a_service_keeps_refuses_what_would_break_it(api, operator_api,
                                                                     data_dir):
    data_dir.chmod(0o755)  # as `mkdir` makes it: only the file system's own modes guard it
    api.post("/api/v1/pools/", {"name": "d1", "driver": "directory"}, format="json")
    fs = service.create_filesystem(name="s3", pool=Pool.objects.get(name="d1"),
                                   kept_by="object")
    segment = Path(fs.path) / "gateway" / "segment"
    segment.parent.mkdir()
    segment.write_bytes(b"raw object bytes")
    for client in (operator_api, api):
        for body in CHANGES:
            r = client.patch("/api/v1/filesystems/s3/", body, format="json")
            assert r.status_code == 409, (body, r.content)
            assert r.json()["error"] == "kept_by_service" and r.json()["kept_by"] == "object"
            assert "kept by the object service" in r.json()["detail"]
    st = os.stat(fs.path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o700)
    assert as_nobody("cat", str(segment)).returncode != 0
    assert as_nobody("ls", fs.path).returncode != 0
    # what a GET answered, sent back whole, changes nothing and is no error
    row = api.get("/api/v1/filesystems/s3/").json()
    r = api.put("/api/v1/filesystems/s3/", {k: row[k] for k in (
        "name", "pool", "quota_bytes", "owner", "group", "mode")}, format="json")
    assert r.status_code == 200, r.content
    # a user's file system still takes all of it
    api.post("/api/v1/filesystems/", {"name": "mine", "pool": "d1"}, format="json")
    r = api.patch("/api/v1/filesystems/mine/", {"owner": "nobody", "mode": "0750"},
                  format="json")
    assert r.status_code == 200 and r.json()["owner"] == "nobody"
    assert api.delete("/api/v1/filesystems/mine/").status_code == 204


def test_a_kept_file_system_changed_before_is_put_back_at_start(api, data_dir):
    """A quota, owner or mode that an earlier version let the API set on the S3 gateway's
    file system is undone by `strata up`'s start (it stopped the gateway for good)."""
    make_pool(api)
    fs = service.create_filesystem(name="s3", pool=Pool.objects.get(name="p1"),
                                   kept_by="object")
    os.chown(fs.path, 65534, 65534)  # before the quota: past it even chown is EDQUOT
    os.chmod(fs.path, 0o755)
    subprocess.run(["btrfs", "qgroup", "limit", "1", fs.path], check=True)
    FileSystem.objects.filter(pk=fs.pk).update(quota_bytes=1, owner="nobody", mode="0755")
    bootstrap.secure_kept_filesystems()
    fs.refresh_from_db()
    assert fs.quota_bytes is None and (fs.owner, fs.group, fs.mode) == ("0", "0", "0700")
    st = os.stat(fs.path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o700)
    assert api.get("/api/v1/filesystems/s3/").json()["quota_bytes"] is None
    with open(Path(fs.path) / "object", "wb") as f:  # the service can write again
        f.write(b"x" * MiB)
        os.fsync(f.fileno())


def test_a_quota_at_or_below_usage_is_refused_and_a_full_file_system_answers_4xx(api):
    make_pool(api)
    r = api.post("/api/v1/filesystems/", {"name": "f", "pool": "p1",
                                          "quota_bytes": 16 * MiB}, format="json")
    path = r.json()["path"]
    with open(os.path.join(path, "keep"), "wb") as f:
        f.write(b"k" * (2 * MiB))
        os.fsync(f.fileno())
    for quota in (1, 2 * MiB):
        r = api.patch("/api/v1/filesystems/f/", {"quota_bytes": quota}, format="json")
        assert r.status_code == 409 and r.json()["error"] == "quota_below_usage", r.content
        assert "holds" in r.json()["detail"]
    assert api.get("/api/v1/filesystems/f/").json()["quota_bytes"] == 16 * MiB
    with pytest.raises(OSError) as err:  # fill it to its quota
        with open(os.path.join(path, "fill"), "wb") as f:
            for _ in range(32):
                f.write(b"f" * MiB)
                os.fsync(f.fileno())
    assert err.value.errno == errno.EDQUOT
    r = api.post("/api/v1/snapshots/", {"name": "s1", "filesystem": "f"}, format="json")
    assert r.status_code == 507 and r.json()["error"] == "no_space", r.content
    assert "raise the quota" in r.json()["detail"]
    # raising (or lifting) the quota of a full file system works, and then so do snapshots
    r = api.patch("/api/v1/filesystems/f/", {"quota_bytes": 64 * MiB}, format="json")
    assert r.status_code == 200, r.content
    r = api.post("/api/v1/snapshots/", {"name": "s1", "filesystem": "f"}, format="json")
    assert r.status_code == 201, r.content
    assert api.patch("/api/v1/filesystems/f/", {"quota_bytes": None},
                     format="json").status_code == 200
