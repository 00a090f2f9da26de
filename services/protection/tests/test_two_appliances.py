"""Two whole appliances (`strata up` twice: own data directories, SQLite databases, Redis,
workers and uvicorn) paired over HTTP: a file system replicates from A to B (full, then
incremental), the bytes on B equal A's by hash, B's lag is shown on A, and failover on B
gives a writable copy. This is the production path: the receiver runs under uvicorn (ASGI)
with the audit middleware, and the sender in A's Celery worker process."""
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from services.protection.tests.helpers import file_hashes, write_files
from tests.appliance import Appliance

pytestmark = pytest.mark.root
MiB = 1 << 20


class Api:
    def __init__(self, app: Appliance):
        self.url = app.url + "/api/v1"
        self.token = app.credentials["token"]
        self.s = requests.Session()
        self.s.headers["Authorization"] = f"Token {self.token}"

    def __call__(self, method, path, **kw):
        return self.s.request(method, self.url + path, timeout=60, **kw)

    def job(self, path, body=None, timeout=120):
        r = self("POST", path, json=body or {})
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self("GET", f"/jobs/{r.json()['id']}/").json()
            if job["state"] in ("succeeded", "failed", "cancelled"):
                return job
            time.sleep(0.3)
        raise AssertionError(f"job did not finish: {job}")


@pytest.fixture
def appliances():
    made = [Appliance(), Appliance()]
    try:
        with ThreadPoolExecutor(2) as pool:  # start both at once: half the waiting
            yield list(pool.map(lambda a: a.start(), made))
    finally:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda a: a.destroy(), made))


def test_replicate_between_two_appliances_and_fail_over(appliances):
    a, b = (Api(x) for x in appliances)
    r = a("POST", "/filesystems/", json={"name": "ckpt", "pool": "default"})
    assert r.status_code == 201, r.text
    src = r.json()["path"]
    write_files(src, {"step-1/shard-0": os.urandom(3 * MiB), "step-1/meta": b"1"})

    r = a("POST", "/replication-peers/", json={"name": "b", "url": appliances[1].url,
                                                "token": b.token})
    assert r.status_code == 201 and r.json()["state"] == "online", r.text
    r = a("POST", "/replications/", json={"name": "ckpt-dr", "filesystem": "ckpt",
                                           "peer": "b", "target_pool": "default",
                                           "every_minutes": 10})
    assert r.status_code == 201, r.text

    for step in (1, 2):
        if step == 2:
            write_files(src, {"step-2/shard-0": os.urandom(2 * MiB), "step-1/meta": b"2"})
        job = a.job("/replications/ckpt-dr/sync/")
        assert job["state"] == "succeeded", job["error"]
        assert bool(job["result"]["parent"]) == (step == 2)
        replica = b("GET", "/replicas/ckpt/").json()
        assert replica["last_snapshot"] == job["result"]["snapshot"]
        fs_b = b("GET", "/filesystems/ckpt/").json()
        got = file_hashes(os.path.join(fs_b["path"], ".snapshots", replica["last_snapshot"]))
        assert got == file_hashes(src)
    rep = a("GET", "/replications/ckpt-dr/").json()
    assert rep["state"] == "ok" and rep["lag_seconds"] is not None

    r = b("POST", "/replicas/ckpt/promote/", json={"name": "ckpt-live"})
    assert r.status_code == 201, r.text
    assert file_hashes(r.json()["path"]) == file_hashes(src)
    job = a.job("/replications/ckpt-dr/sync/")
    assert job["state"] == "failed" and "promoted" in job["error"], job
