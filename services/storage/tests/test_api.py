"""The storage API on the real local (btrfs) driver: what a user gets back, and that bad
requests get a clear 4xx and change nothing."""
import errno
import os
import subprocess

import pytest

from services.storage.models import FileSystem, Pool, Snapshot

pytestmark = [pytest.mark.root, pytest.mark.django_db]
MiB = 1 << 20


def loops(data_dir) -> set:
    """Loop devices whose backing file lies in this test's data directory."""
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return {line.split(":")[0] for line in out.splitlines() if str(data_dir) in line}


def make_pool(api, name="p1", redundancy="none", n=1, size="512M"):
    r = api.post("/api/v1/pools/", {"name": name, "driver": "local", "redundancy": redundancy,
                                    "devices": [f"image:{size}"] * n}, format="json")
    assert r.status_code == 201, r.json()
    return r.json()


def test_pool_filesystem_snapshot_clone_round_trip(api):
    pool = make_pool(api, redundancy="mirror", n=2)
    assert pool["state"] == "online" and pool["size_bytes"] > 0
    assert len(pool["device_status"]) == 2

    r = api.post("/api/v1/filesystems/", {"name": "ckpt", "pool": "p1",
                                          "quota_bytes": 64 * MiB}, format="json")
    assert r.status_code == 201, r.json()
    fs = r.json()
    with open(os.path.join(fs["path"], "shard-0"), "wb") as f:
        f.write(b"A" * MiB)

    r = api.post("/api/v1/snapshots/", {"name": "s1", "filesystem": "ckpt"}, format="json")
    assert r.status_code == 201, r.json()
    snap = r.json()
    with open(os.path.join(fs["path"], "shard-0"), "wb") as f:
        f.write(b"B" * MiB)
    with open(os.path.join(fs["path"], ".snapshots", "s1", "shard-0"), "rb") as f:
        assert f.read() == b"A" * MiB

    r = api.post(f"/api/v1/snapshots/{snap['id']}/clone/", {"name": "ckpt-copy"}, format="json")
    assert r.status_code == 201, r.json()
    with open(os.path.join(r.json()["path"], "shard-0"), "rb") as f:
        assert f.read() == b"A" * MiB

    listed = api.get("/api/v1/snapshots/?filesystem=ckpt").json()["results"]
    assert [s["name"] for s in listed] == ["s1"] and listed[0]["clones"] == ["ckpt-copy"]

    # a snapshot a clone depends on cannot go
    r = api.delete(f"/api/v1/snapshots/{snap['id']}/")
    assert r.status_code == 409 and "ckpt-copy" in r.json()["detail"]
    assert Snapshot.objects.filter(pk=snap["id"]).exists()
    assert os.path.isdir(os.path.join(fs["path"], ".snapshots", "s1"))

    # a pool holding file systems cannot go
    r = api.delete("/api/v1/pools/p1/")
    assert r.status_code == 409 and "ckpt" in r.json()["detail"]
    assert os.path.ismount(pool["mountpoint"])

    # then everything is deleted in order
    assert api.delete("/api/v1/filesystems/ckpt-copy/").status_code == 204
    assert api.delete(f"/api/v1/snapshots/{snap['id']}/").status_code == 204
    assert api.delete("/api/v1/filesystems/ckpt/").status_code == 204
    assert not os.path.exists(fs["path"])
    assert api.delete("/api/v1/pools/p1/").status_code == 204
    assert not Pool.objects.exists()


def test_volume_create_resize_snapshot(api):
    make_pool(api)
    r = api.post("/api/v1/volumes/", {"name": "vm1", "pool": "p1", "size_bytes": 64 * MiB},
                 format="json")
    assert r.status_code == 201, r.json()
    vol = r.json()
    with open(vol["path"], "r+b") as f:
        f.seek(10 * MiB)
        f.write(b"x" * 4096)
    r = api.post("/api/v1/volumes/vm1/resize/", {"size_bytes": 128 * MiB}, format="json")
    assert r.status_code == 200 and r.json()["size_bytes"] == 128 * MiB
    assert os.path.getsize(vol["path"]) == 128 * MiB
    r = api.post("/api/v1/volumes/vm1/resize/", {"size_bytes": 32 * MiB}, format="json")
    assert r.status_code == 400 and r.json()["error"] == "invalid"
    assert os.path.getsize(vol["path"]) == 128 * MiB

    r = api.post("/api/v1/snapshots/", {"name": "before", "volume": "vm1"}, format="json")
    assert r.status_code == 201
    with open(vol["path"], "r+b") as f:
        f.seek(10 * MiB)
        f.write(b"y" * 4096)
    r = api.post(f"/api/v1/snapshots/{r.json()['id']}/clone/", {"name": "vm1-old"}, format="json")
    assert r.status_code == 201, r.json()
    with open(r.json()["path"], "rb") as f:
        f.seek(10 * MiB)
        assert f.read(4096) == b"x" * 4096


@pytest.mark.parametrize("body,field", [
    ({"name": "Bad Name", "devices": ["image:256M"]}, "name"),
    ({"name": "m", "redundancy": "mirror", "devices": ["image:256M"]}, "devices"),
    ({"name": "r", "redundancy": "raid10", "devices": ["image:256M"] * 3}, "devices"),
    ({"name": "x", "redundancy": "raid7", "devices": ["image:256M"]}, "redundancy"),
    ({"name": "x", "devices": [{"fault_domain": "rack1"}]}, "devices"),
])
def test_bad_pool_requests_are_refused_and_change_nothing(api, data_dir, body, field):
    before = loops(data_dir)
    r = api.post("/api/v1/pools/", {"driver": "local", **body}, format="json")
    assert r.status_code == 400
    assert r.json()["error"] == "invalid" and field in r.json()["fields"]
    assert r.json()["detail"]
    assert not Pool.objects.exists() and loops(data_dir) == before


def test_device_in_use_is_refused(api, data_dir):
    pool = make_pool(api)
    busy = pool["device_status"][0]["path"]
    before = loops(data_dir)
    r = api.post("/api/v1/pools/", {"name": "p2", "driver": "local", "devices": [busy]},
                 format="json")
    assert r.status_code == 409, r.json()
    assert r.json()["error"] == "in_use" and busy in r.json()["detail"]
    assert list(Pool.objects.values_list("name", flat=True)) == ["p1"]
    assert loops(data_dir) == before
    assert os.path.ismount(pool["mountpoint"])


def test_quota_larger_than_pool_and_write_past_quota(api):
    pool = make_pool(api)
    r = api.post("/api/v1/filesystems/", {"name": "big", "pool": "p1",
                                          "quota_bytes": 2 * pool["size_bytes"]}, format="json")
    assert r.status_code == 400 and "quota_bytes" in r.json()["fields"]
    assert not FileSystem.objects.exists()

    r = api.post("/api/v1/filesystems/", {"name": "small", "pool": "p1",
                                          "quota_bytes": 16 * MiB}, format="json")
    assert r.status_code == 201, r.json()
    path = r.json()["path"]
    with open(os.path.join(path, "keep"), "wb") as f:
        f.write(b"k" * MiB)
        os.fsync(f.fileno())
    with pytest.raises(OSError) as err:
        with open(os.path.join(path, "fill"), "wb") as f:
            for _ in range(64):
                f.write(b"f" * MiB)
                os.fsync(f.fileno())
    assert err.value.errno == errno.EDQUOT
    with open(os.path.join(path, "keep"), "rb") as f:
        assert f.read() == b"k" * MiB


def test_duplicate_and_missing_references(api):
    make_pool(api)
    assert api.post("/api/v1/filesystems/", {"name": "a", "pool": "p1"},
                    format="json").status_code == 201
    r = api.post("/api/v1/filesystems/", {"name": "a", "pool": "p1"}, format="json")
    assert r.status_code == 409 and "name" in r.json()["fields"]  # a name taken: state
    r = api.post("/api/v1/filesystems/", {"name": "b", "pool": "nope"}, format="json")
    assert r.status_code == 400 and "pool" in r.json()["fields"]
    r = api.post("/api/v1/snapshots/", {"name": "s", "filesystem": "a", "volume": None},
                 format="json")
    assert r.status_code == 201
    r = api.post("/api/v1/snapshots/", {"name": "s", "filesystem": "a"}, format="json")
    assert r.status_code == 409 and "already has a snapshot" in r.json()["detail"]
    r = api.post("/api/v1/snapshots/", {"name": "t"}, format="json")
    assert r.status_code == 400 and "exactly one" in r.json()["detail"]
    assert api.get("/api/v1/filesystems/nope/").status_code == 404
    assert api.get("/api/v1/filesystems/nope/").json()["error"] == "not_found"


def test_a_spdk_pool_without_a_running_spdk_tgt_is_a_503_and_creates_nothing(api, monkeypatch,
                                                                           tmp_path):
    monkeypatch.setenv("STRATA_SPDK_SOCKET", str(tmp_path / "no-spdk.sock"))
    r = api.post("/api/v1/pools/", {"name": "fast", "driver": "spdk",
                                    "devices": ["/dev/nvme9n1"]}, format="json")
    assert r.status_code == 503, r.content
    assert r.json()["error"] == "unavailable" and "spdk_tgt" in r.json()["detail"]
    assert api.get("/api/v1/pools/fast/").status_code == 404


def test_a_file_system_a_service_keeps_for_itself_is_marked_and_not_offered(api):
    from services.storage import service

    api.post("/api/v1/pools/", {"name": "d1", "driver": "directory"}, format="json")
    service.create_filesystem(name="s3", pool=Pool.objects.get(name="d1"), kept_by="object")
    api.post("/api/v1/filesystems/", {"name": "mine", "pool": "d1"}, format="json")
    rows = {f["name"]: f["kept_by"] for f in api.get("/api/v1/filesystems/").json()["results"]}
    assert rows == {"s3": "object", "mine": ""}
    assert [f["name"] for f in api.get("/api/v1/filesystems/?kept_by=object").json()[
        "results"]] == ["s3"]
    for path, body in (("/api/v1/nfs-exports/", {"filesystem": "s3", "pseudo": "/s3"}),
                       ("/api/v1/smb-shares/", {"name": "s3", "filesystem": "s3"}),
                       ("/api/v1/checkpoint-jobs/", {"name": "j", "filesystem": "s3"})):
        r = api.post(path, body, format="json")
        assert r.status_code == 400 and "filesystem" in r.json()["fields"], (path, r.json())
