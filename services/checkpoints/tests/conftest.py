"""Fixtures of the checkpoint tests: a btrfs pool, a file system and a checkpoint job,
made through the API as a user would."""
import hashlib
import os
import shutil
import tempfile

import pytest

from tests.kit import Gateway

ACCESS, SECRET = "CKPTTESTKEY", "ckpt-test-secret"   # the S3 gateway's admin key


def make_job(api, name="llm", fs="train", **policy):
    """A pool p1 on one image device, file system `fs` on it, and checkpoint job `name`."""
    r = api.post("/api/v1/pools/", {"name": "p1", "driver": "local",
                                    "devices": ["image:512M"]}, format="json")
    assert r.status_code == 201, r.json()
    r = api.post("/api/v1/filesystems/", {"name": fs, "pool": "p1"}, format="json")
    assert r.status_code == 201, r.json()
    r = api.post("/api/v1/checkpoint-jobs/", {"name": name, "filesystem": fs, **policy},
                 format="json")
    assert r.status_code == 201, r.json()
    return r.json()


def begin(api, job, step):
    r = api.post(f"/api/v1/checkpoint-jobs/{job}/versions/", {"step": step}, format="json")
    assert r.status_code in (200, 201), r.json()
    return r.json()


def write_shards(version, shards: dict) -> list:
    """Write {name: bytes} into a version's directory; return the manifest with sha256."""
    manifest = []
    for name, data in shards.items():
        path = os.path.join(version["path"], name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        manifest.append({"name": name, "size": len(data),
                         "sha256": hashlib.sha256(data).hexdigest()})
    return manifest


def commit(api, job, version, manifest):
    return api.post(f"/api/v1/checkpoint-jobs/{job}/versions/{version['id']}/commit/",
                    {"manifest": manifest}, format="json")


def save(api, job, step, shards=None):
    """Begin, write and commit one version; return it as committed."""
    v = begin(api, job, step)
    manifest = write_shards(v, shards or {"rank0.bin": b"%d" % step * 100})
    r = commit(api, job, v, manifest)
    assert r.status_code == 200, r.json()
    return r.json()


def latest_step(api, job):
    r = api.get(f"/api/v1/checkpoint-jobs/{job}/latest/")
    return r.json()["step"] if r.status_code == 200 else None


@pytest.fixture
def job(api):
    return make_job(api)


@pytest.fixture
def gateway():
    """A Strata S3 gateway subprocess on a free port, with its data in a temporary dir."""
    work = tempfile.mkdtemp(prefix="strata-test-")
    gw = Gateway(work, {ACCESS: {"secret_key": SECRET, "user": "trainer", "admin": True}})
    try:
        gw.start(timeout=30)
        yield {"endpoint": gw.endpoint, "access_key": ACCESS, "secret_key": SECRET}
    finally:
        gw.stop()
        shutil.rmtree(work, ignore_errors=True)
