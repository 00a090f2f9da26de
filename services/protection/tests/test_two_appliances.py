"""Two whole appliances (`strata up` twice: own data directories, SQLite databases, Redis,
workers and uvicorn) paired over HTTP: a file system replicates from A to B (full, then
incremental), the bytes on B equal A's by hash, B's lag is shown on A, and failover on B
gives a writable copy. Then both sides are written, A fails back (the link dropped once
mid-pull: B's `btrfs send` stops and the next run, through the CLI, resumes): A (in
place, its NFS export serving throughout) holds B's writes, its own later writes are kept in
a snapshot, B's replica is re-based, and the next forward run is incremental. This is the
production path: the receiver and the failback stream run under uvicorn (ASGI) with the
audit middleware, the sender and the puller in A's Celery worker process. Every step is
checked by the SHA-256 of every file."""
import contextlib
import json
import os
import subprocess
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from services.protection.tests.helpers import CutProxy, file_hashes, write_files
from tests.appliance import Appliance
from tests.kit import wait_for, wait_job

pytestmark = pytest.mark.root
MiB = 1 << 20


class Api:
    def __init__(self, app: Appliance):
        self.base = app.url
        self.url = app.url + "/api/v1"
        self.token = app.credentials["token"]
        self.s = requests.Session()
        self.s.headers["Authorization"] = f"Token {self.token}"

    def __call__(self, method, path, **kw):
        return self.s.request(method, self.url + path, timeout=60, **kw)

    def job(self, path, body=None, timeout=120):
        r = self("POST", path, json=body or {})
        assert r.status_code == 202, r.text
        return wait_job(self.base, r.json()["id"], timeout, token=self.token, interval=0.3)


@pytest.fixture
def appliances():
    from services.file.daemons import nfs_server

    made = [Appliance(), Appliance()]
    try:
        with ThreadPoolExecutor(2) as pool:  # start both at once: half the waiting
            yield list(pool.map(lambda a: a.start(), made))
    finally:
        def stop(app):
            with contextlib.suppress(Exception):
                if app.proc and app.proc.poll() is None:
                    app.stop()
            with contextlib.suppress(Exception):  # btrfs binds would keep the pool mounted
                nfs_server(app.data_dir, {}).unbind_all()
            app.destroy()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(stop, made))


def nfs_hashes(port: int, pseudo: str, names) -> dict:
    """SHA-256 of files read back over NFS (nfs-rs), or None when nfs-rs is missing."""
    try:
        from services.file.tests.nfs_client import connect, read_hash
    except ImportError:
        return None
    try:
        import nfs_rs  # noqa: F401
    except ImportError:
        return None
    with connect(port, pseudo) as client:
        return {name: read_hash(client, name)[1] for name in names}


def sending(data_dir) -> list:
    """`btrfs send` processes working on an appliance's pools."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines()
            if "btrfs send" in line and str(data_dir) in line and "sh -c" not in line]


def test_replicate_between_two_appliances_fail_over_and_back(appliances, request):
    a, b = (Api(x) for x in appliances)
    r = a("POST", "/filesystems/", json={"name": "ckpt", "pool": "default"})
    assert r.status_code == 201, r.text
    src = r.json()["path"]
    write_files(src, {"step-1/shard-0": os.urandom(3 * MiB), "step-1/meta": b"1"})

    # A reaches B through a TCP proxy that can drop the link
    u = urllib.parse.urlparse(appliances[1].url)
    proxy = CutProxy(u.hostname, u.port)
    request.addfinalizer(proxy.close)
    r = a("POST", "/replication-peers/", json={"name": "b", "url": proxy.url,
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
        if step == 1:
            full_bytes = job["result"]["bytes"]
        replica = b("GET", "/replicas/ckpt/").json()
        assert replica["last_snapshot"] == job["result"]["snapshot"]
        fs_b = b("GET", "/filesystems/ckpt/").json()
        got = file_hashes(os.path.join(fs_b["path"], ".snapshots", replica["last_snapshot"]))
        assert got == file_hashes(src)
    rep = a("GET", "/replications/ckpt-dr/").json()
    assert rep["state"] == "ok" and rep["lag_seconds"] is not None

    r = a("POST", "/replications/ckpt-dr/failback/")
    assert r.status_code == 409 and "not promoted" in r.json()["detail"], r.text

    # an NFS export of A's file system, which must keep serving through the failback
    done = appliances[0].cli("--json", "nfs-export", "create", "ckpt", "--client",
                             "127.0.0.1 rw no_root_squash")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["state"] == "online", done.stdout

    # failover
    r = b("POST", "/replicas/ckpt/promote/", json={"name": "ckpt-live"})
    assert r.status_code == 201, r.text
    live = r.json()["path"]
    assert file_hashes(live) == file_hashes(src)
    job = a.job("/replications/ckpt-dr/sync/")
    assert job["state"] == "failed" and "promoted" in job["error"], job

    # both sides are written after the failover
    write_files(live, {"step-3/shard-0": os.urandom(2 * MiB), "step-1/meta": b"3-on-b"})
    at_b = file_hashes(live)
    write_files(src, {"a-late": b"written on A after the failover"})
    at_a = file_hashes(src)

    # failback; the link drops while A pulls: B stops sending, A is untouched
    proxy.count_download, proxy.cut_after = True, MiB
    job = a.job("/replications/ckpt-dr/failback/")
    assert job["state"] == "failed", job
    assert proxy.cuts >= 1 and file_hashes(src) == at_a
    assert a("GET", "/replications/ckpt-dr/").json()["failback"]["phase"] == "pull"
    wait_for(lambda: not sending(appliances[1].data_dir), 30, "B to stop sending", interval=0.2)
    proxy.cut_after, proxy.count_download = None, False
    # run again, through the CLI on A: it resumes and completes
    done = appliances[0].cli("--json", "replication", "failback", "ckpt-dr")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"]["resumed_at"] > 0, done.stdout
    rep = a("GET", "/replications/ckpt-dr/").json()
    assert rep["state"] == "ok" and rep["failback"] == {}, rep
    back = rep["last_snapshot"]
    fs_a = a("GET", "/filesystems/ckpt/").json()
    assert fs_a["path"] == src and file_hashes(src) == at_b  # in place, with B's writes
    kept = [d for d in os.listdir(os.path.join(src, ".snapshots"))
            if d.startswith("failback-ckpt-dr-")]
    assert len(kept) == 1 and file_hashes(os.path.join(src, ".snapshots", kept[0])) == at_a
    over_nfs = nfs_hashes(appliances[0].nfs_port, "/ckpt", ["step-3/shard-0", "step-1/meta"])
    if over_nfs is not None:
        assert over_nfs == {k: at_b[k] for k in over_nfs}, over_nfs
    replica = b("GET", "/replicas/ckpt/").json()
    assert replica["promoted_to"] == "" and replica["last_snapshot"] == back, replica
    fs_b = b("GET", "/filesystems/ckpt/").json()
    assert file_hashes(os.path.join(fs_b["path"], ".snapshots", back)) == at_b

    # forward replication resumes, incrementally on the failback snapshot
    write_files(src, {"step-4/meta": b"4"})
    job = a.job("/replications/ckpt-dr/sync/")
    assert job["state"] == "succeeded", job["error"]
    assert job["result"]["parent"] == back
    assert job["result"]["bytes"] < full_bytes // 10, (job["result"], full_bytes)
    got = file_hashes(os.path.join(fs_b["path"], ".snapshots", job["result"]["snapshot"]))
    assert got == file_hashes(src)
    r = a("POST", "/replications/ckpt-dr/failback/")
    assert r.status_code == 409 and "not promoted" in r.json()["detail"], r.text
