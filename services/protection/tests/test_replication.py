"""Replication between two appliances, honestly simplified to one process: the sending
appliance is this test's API and Celery worker, the receiving one is the same code served
by pytest-django's ``live_server`` over real HTTP (same database, so the replica gets its
own pool ``site-b`` and its own name). Links are cut by a real TCP proxy in between.

Checked: full then incremental sends land on the replica byte for byte (by hash); a link
cut mid-transfer leaves the replica unchanged and the next run resumes and completes;
failover gives a writable copy of the newest replicated state and stops further sends;
failback (cut once mid-pull, then resumed) brings the writes made on the promoted copy back
in place, keeps the original's own later writes in a snapshot, and forward sends resume
incrementally. Also: a volume's failback (same file, bytes back), the failback refusals
(409s, viewers), and a worker killed mid-pull (the next run resumes)."""
import hashlib
import os
import urllib.parse

import pytest
from django_celery_beat.models import PeriodicTask

from services.protection.locks import run_lock
from services.protection.models import Replica, Replication
from services.protection.receiver import Transfer, chunk_bytes
from services.protection.tests.helpers import (
    CutProxy,
    file_hashes,
    write_files,
)
from services.storage.models import FileSystem, Volume
from tests.kit import run_job

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


def make_pool(api, name):
    r = api.post("/api/v1/pools/", {"name": name, "driver": "local",
                                    "devices": ["image:400M"]}, format="json")
    assert r.status_code == 201, r.json()


def replica_snapshots(name):
    fs = FileSystem.objects.filter(name=name).first()
    return [] if fs is None else sorted(fs.snapshots.values_list("name", flat=True))


def replica_hashes(name, snapshot):
    fs = FileSystem.objects.get(name=name)
    return file_hashes(os.path.join(fs.path, ".snapshots", snapshot))


@pytest.fixture
def proxy(live_server):
    u = urllib.parse.urlparse(live_server.url)
    p = CutProxy(u.hostname, u.port)
    yield p
    p.close()


def test_replicate_cut_link_resume_failover_and_failback(api, worker, live_server, proxy):
    make_pool(api, "site-a")
    make_pool(api, "site-b")
    r = api.post("/api/v1/filesystems/", {"name": "ckpt", "pool": "site-a"}, format="json")
    assert r.status_code == 201, r.json()
    src = r.json()["path"]
    write_files(src, {"model/shard-0": os.urandom(3 * MiB), "model/shard-1": os.urandom(MiB),
                      "meta.json": b'{"step": 100}'})

    # pairing checks the token against the peer
    token = api.token
    r = api.post("/api/v1/replication-peers/", {"name": "site-b", "url": proxy.url,
                                                "token": "wrong"}, format="json")
    assert r.status_code == 400 and "token" in r.json()["detail"].lower(), r.json()
    r = api.post("/api/v1/replication-peers/", {"name": "site-b", "url": proxy.url,
                                                "token": token}, format="json")
    assert r.status_code == 201 and r.json()["state"] == "online", r.json()
    assert "token" not in r.json()

    r = api.post("/api/v1/replications/", {
        "name": "ckpt-dr", "filesystem": "ckpt", "peer": "site-b", "target_pool": "site-b",
        "target_name": "ckpt-replica", "every_minutes": 5}, format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["lag_seconds"] is None
    assert PeriodicTask.objects.get(name="protection:replication:ckpt-dr").interval.every == 5

    # 1. full
    job = run_job(api, "/api/v1/replications/ckpt-dr/sync/")
    assert job["state"] == "succeeded", job
    first = job["result"]["snapshot"]
    assert job["result"]["parent"] == "" and job["result"]["bytes"] > 4 * MiB
    assert job["bytes_done"] == job["bytes_total"] == job["result"]["bytes"], job
    assert replica_snapshots("ckpt-replica") == [first]
    assert replica_hashes("ckpt-replica", first) == file_hashes(src)
    rep = api.get("/api/v1/replications/ckpt-dr/").json()
    assert rep["state"] == "ok" and rep["last_snapshot"] == first
    assert rep["lag_seconds"] is not None and rep["lag_seconds"] >= 0

    # 2. incremental: only the change travels
    write_files(src, {"model/shard-1": os.urandom(MiB), "meta.json": b'{"step": 200}'})
    os.remove(os.path.join(src, "model/shard-0"))
    job = run_job(api, "/api/v1/replications/ckpt-dr/sync/")
    assert job["state"] == "succeeded", job
    second = job["result"]["snapshot"]
    assert job["result"]["parent"] == first and job["result"]["bytes"] < 2 * MiB
    assert replica_hashes("ckpt-replica", second) == file_hashes(src)
    # only the newest replication snapshot stays on the source (the next base)
    assert [s.name for s in FileSystem.objects.get(name="ckpt").snapshots.all()] == [second]

    # 3. the link drops mid-transfer: the replica does not change. The stream is sent in
    # chunks of chunk_bytes() (8 MiB); the cut falls inside the second one, so the first
    # is on the peer whatever the timing of the cut.
    chunk = chunk_bytes()
    write_files(src, {"model/shard-2": os.urandom(chunk + 4 * MiB),
                      "meta.json": b'{"step": 300}'})
    expected = file_hashes(src)
    proxy.cut_after = chunk + 2 * MiB
    job = run_job(api, "/api/v1/replications/ckpt-dr/sync/")
    assert job["state"] == "failed" and "unreachable" in job["error"], job
    assert proxy.cuts >= 1
    assert replica_snapshots("ckpt-replica") == sorted([first, second])
    assert replica_hashes("ckpt-replica", second) != expected
    rep = Replication.objects.get(name="ckpt-dr")
    assert rep.state == "error" and rep.pending_snapshot and rep.last_snapshot == second
    held = Transfer(rep.pending_transfer).received  # what the peer kept of the cut stream
    assert held >= chunk, (held, job)

    # 4. the next run resumes where the peer's copy stopped and completes
    proxy.cut_after = None
    job = run_job(api, "/api/v1/replications/ckpt-dr/sync/")
    assert job["state"] == "succeeded", job
    third = job["result"]["snapshot"]
    assert third == rep.pending_snapshot and job["result"]["parent"] == second
    assert job["result"]["resumed_at"] >= chunk
    assert replica_hashes("ckpt-replica", third) == expected
    assert Replication.objects.get(name="ckpt-dr").pending_snapshot == ""

    # 5. failover: the replica's newest state as a writable file system
    r = api.post("/api/v1/replicas/ckpt-replica/promote/", {"name": "ckpt-live"}, format="json")
    assert r.status_code == 201, r.json()
    live = r.json()["path"]
    assert file_hashes(live) == expected
    write_files(live, {"after-failover": b"written at site b"})
    assert Replica.objects.get(name="ckpt-replica").promoted_to == "ckpt-live"
    job = run_job(api, "/api/v1/replications/ckpt-dr/sync/")
    assert job["state"] == "failed" and "promoted" in job["error"], job
    assert replica_snapshots("ckpt-replica")[-1] == third

    # 6. failback is refused while a run of the replication holds its lock
    with run_lock("replication:ckpt-dr"):
        r = api.post("/api/v1/replications/ckpt-dr/failback/", {}, format="json")
    assert r.status_code == 409 and "already running" in r.json()["detail"], r.json()
    # both sides are written after the failover
    write_files(live, {"model/shard-3": os.urandom(2 * MiB), "meta.json": b'{"step": 400}'})
    at_b = file_hashes(live)
    write_files(src, {"a-late": b"written at site a after the failover"})
    at_a = file_hashes(src)

    # 7. the link drops while A pulls B's increment: A's file system is untouched, forward
    # sync waits, and the next failback run resumes the pull and completes
    proxy.count_download, proxy.cut_after = True, MiB
    job = run_job(api, "/api/v1/replications/ckpt-dr/failback/")
    assert job["state"] == "failed", job
    assert "unreachable" in job["error"] or "again to resume" in job["error"], job
    assert proxy.cuts >= 2 and file_hashes(src) == at_a
    assert Replication.objects.get(name="ckpt-dr").failback["phase"] == "pull"
    r = api.post("/api/v1/replications/ckpt-dr/sync/", {}, format="json")
    assert r.status_code == 409 and "failback" in r.json()["detail"], r.json()
    # a writer at B that was not stopped: after the failback snapshot, so not brought back,
    # but named in the failback's result
    write_files(live, {"model/late-at-b": b"written at site b during the failback"})
    proxy.cut_after, proxy.count_download = None, False
    job = run_job(api, "/api/v1/replications/ckpt-dr/failback/")
    assert job["state"] == "succeeded", job
    back = job["result"]
    assert back["late_changes"] == ["model/late-at-b"] and back["late_change_count"] == 1, back
    assert "model/late-at-b" in back["peer_copy"], back
    assert back["resumed_at"] > 0 and back["parent"] == third
    assert job["bytes_done"] == job["bytes_total"] == back["bytes"], job  # the whole stream
    # A has B's writes, in place; its own late writes are kept in a snapshot
    assert back["path"] == src and file_hashes(src) == at_b
    assert file_hashes(os.path.join(src, ".snapshots", back["preserved"])) == at_a
    replica = Replica.objects.get(name="ckpt-replica")
    assert replica.promoted_to == "" and replica.last_snapshot == back["snapshot"]
    assert Replication.objects.get(name="ckpt-dr").failback == {}

    # 8. forward replication resumes, incrementally on the failback snapshot
    write_files(src, {"meta.json": b'{"step": 500}'})
    job = run_job(api, "/api/v1/replications/ckpt-dr/sync/")
    assert job["state"] == "succeeded", job
    assert job["result"]["parent"] == back["snapshot"]
    assert job["result"]["bytes"] < 256 * 1024, job["result"]
    assert replica_hashes("ckpt-replica", job["result"]["snapshot"]) == file_hashes(src)
    r = api.post("/api/v1/replications/ckpt-dr/failback/", {}, format="json")
    assert r.status_code == 409 and "not promoted" in r.json()["detail"], r.json()


def test_replicate_a_volume_and_refuse_a_non_replica_target(api, worker, live_server):
    make_pool(api, "site-a")
    make_pool(api, "site-b")
    vol = api.post("/api/v1/volumes/", {"name": "vm", "pool": "site-a",
                                        "size_bytes": 32 * MiB}, format="json").json()
    with open(vol["path"], "r+b") as fh:
        fh.seek(3 * MiB)
        fh.write(os.urandom(2 * MiB))
    token = api.token
    assert api.post("/api/v1/replication-peers/", {"name": "b", "url": live_server.url,
                                                   "token": token},
                    format="json").status_code == 201
    # a target name that is an ordinary volume there is refused, and nothing changes
    api.post("/api/v1/volumes/", {"name": "taken", "pool": "site-b", "size_bytes": MiB},
             format="json")
    api.post("/api/v1/replications/", {"name": "bad", "volume": "vm", "peer": "b",
                                       "target_pool": "site-b", "target_name": "taken"},
             format="json")
    job = run_job(api, "/api/v1/replications/bad/sync/")
    assert job["state"] == "failed" and "not a replica" in job["error"], job

    r = api.post("/api/v1/replications/", {"name": "vm-dr", "volume": "vm", "peer": "b",
                                           "target_pool": "site-b",
                                           "target_name": "vm-replica"}, format="json")
    assert r.status_code == 201, r.json()
    for _ in range(2):
        job = run_job(api, "/api/v1/replications/vm-dr/sync/")
        assert job["state"] == "succeeded", job
        replica = Volume.objects.get(name="vm-replica")
        with open(os.path.join(os.path.dirname(replica.path), ".snapshots",
                               job["result"]["snapshot"], "data"), "rb") as a, \
                open(vol["path"], "rb") as b:
            assert hashlib.sha256(a.read()).digest() == hashlib.sha256(b.read()).digest()
        with open(vol["path"], "r+b") as fh:
            fh.seek(20 * MiB)
            fh.write(os.urandom(MiB))
    assert job["result"]["parent"] and replica.size_bytes == 32 * MiB

    # failover, writes on both sides, failback: the volume's bytes come back in place
    r = api.post("/api/v1/replicas/vm-replica/promote/", {"name": "vm-live"}, format="json")
    assert r.status_code == 201, r.json()
    live = r.json()["path"]
    with open(live, "r+b") as fh:
        fh.seek(9 * MiB)
        fh.write(os.urandom(MiB))
    with open(vol["path"], "r+b") as fh:
        fh.seek(30 * MiB)
        fh.write(os.urandom(MiB))
    at_a, inode = sha256_of(vol["path"]), os.stat(vol["path"]).st_ino
    job = run_job(api, "/api/v1/replications/vm-dr/failback/")
    assert job["state"] == "succeeded", job
    back = job["result"]
    assert sha256_of(vol["path"]) == sha256_of(live) != at_a
    assert os.stat(vol["path"]).st_ino == inode  # same file: an iSCSI/NBD export keeps it
    kept = os.path.join(os.path.dirname(vol["path"]), ".snapshots", back["preserved"], "data")
    assert sha256_of(kept) == at_a
    with open(vol["path"], "r+b") as fh:
        fh.write(os.urandom(MiB))
    job = run_job(api, "/api/v1/replications/vm-dr/sync/")
    assert job["state"] == "succeeded", job
    assert job["result"]["parent"] == back["snapshot"] and job["result"]["bytes"] < 4 * MiB
    got = os.path.join(os.path.dirname(Volume.objects.get(name="vm-replica").path),
                       ".snapshots", job["result"]["snapshot"], "data")
    assert sha256_of(got) == sha256_of(vol["path"])


def sha256_of(path) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def test_failback_refusals(api, viewer_api, worker, live_server):
    """A failback needs a failover on the peer and a snapshot both sides still have; the
    peer-side endpoints refuse a replica that was not promoted and unknown snapshots."""
    make_pool(api, "site-a")
    make_pool(api, "site-b")
    src = api.post("/api/v1/filesystems/", {"name": "solo", "pool": "site-a"},
                   format="json").json()["path"]
    write_files(src, {"f": os.urandom(MiB)})
    token = api.token
    assert api.post("/api/v1/replication-peers/", {"name": "b", "url": live_server.url,
                                                   "token": token},
                    format="json").status_code == 201
    assert api.post("/api/v1/replications/", {
        "name": "solo-dr", "filesystem": "solo", "peer": "b", "target_pool": "site-b",
        "target_name": "solo-replica"}, format="json").status_code == 201
    job = run_job(api, "/api/v1/replications/solo-dr/sync/")
    assert job["state"] == "succeeded", job
    common = job["result"]["snapshot"]

    r = api.get("/api/v1/replicas/solo-replica/failback-stream/",
                {"snapshot": common, "parent": common})
    assert r.status_code == 409 and "not been promoted" in r.json()["detail"], r.json()
    r = api.post("/api/v1/replications/solo-dr/failback/", {}, format="json")
    assert r.status_code == 409 and "not promoted" in r.json()["detail"], r.json()

    assert api.post("/api/v1/replicas/solo-replica/promote/", {"name": "solo-live"},
                    format="json").status_code == 201
    r = api.get("/api/v1/replicas/solo-replica/failback-stream/",
                {"snapshot": "nope", "parent": common})
    assert r.status_code == 404 and r.json()["error"] == "not_found", r.json()
    # the stream is the file system's content: not for viewers
    r = viewer_api.get("/api/v1/replicas/solo-replica/failback-stream/",
                       {"snapshot": common, "parent": common})
    assert r.status_code == 403, r.json()
    # this side lost the snapshot both had: no incremental way back
    snap = api.get("/api/v1/snapshots/", {"filesystem": "solo"}).json()
    snap = (snap["results"] if isinstance(snap, dict) else snap)[0]
    assert snap["name"] == common
    assert api.delete(f"/api/v1/snapshots/{snap['id']}/").status_code == 204
    r = api.post("/api/v1/replications/solo-dr/failback/", {}, format="json")
    assert r.status_code == 409 and "shares no snapshot" in r.json()["detail"], r.json()
    assert "solo-live" in r.json()["detail"]  # what to do instead: replicate it back
    assert Replication.objects.get(name="solo-dr").failback == {}
    # a failback that cannot complete can be abandoned; syncs are allowed again
    r = api.post("/api/v1/replications/solo-dr/failback/", {"abandon": True}, format="json")
    assert r.status_code == 409 and "no failback" in r.json()["detail"], r.json()
    Replication.objects.filter(name="solo-dr").update(failback={
        "phase": "pull", "snapshot": "repl-solo-dr-x", "parent": common, "transfer": "",
        "preserved": ""})
    r = api.post("/api/v1/replications/solo-dr/sync/", {}, format="json")
    assert r.status_code == 409 and "failback" in r.json()["detail"], r.json()
    r = api.post("/api/v1/replications/solo-dr/failback/", {"abandon": True}, format="json")
    assert r.status_code == 200 and r.json()["failback"] == {}, r.json()
    assert "abandoned" in r.json()["error"]
    job = run_job(api, "/api/v1/replications/solo-dr/sync/")
    assert job["state"] == "failed" and "Fail back first" in job["error"], job


def test_kill9_mid_failback_then_resume(api, data_dir, tmp_path, live_server):
    """The worker pulling a failback is killed (SIGKILL): this side's file system is as it
    was, and the next run, on another worker, resumes the pull where the spool stops."""
    import time

    from celery.contrib.testing.worker import start_worker

    from plane.celery import app
    from plane.models import Job
    from services.protection.tests.helpers import WorkerProcess
    from tests.kit import wait_for

    make_pool(api, "site-a")
    make_pool(api, "site-b")
    src = api.post("/api/v1/filesystems/", {"name": "big", "pool": "site-a"},
                   format="json").json()["path"]
    write_files(src, {"base": os.urandom(4 * MiB)})
    token = api.token
    assert api.post("/api/v1/replication-peers/", {"name": "b", "url": live_server.url,
                                                   "token": token},
                    format="json").status_code == 201
    assert api.post("/api/v1/replications/", {
        "name": "big-dr", "filesystem": "big", "peer": "b", "target_pool": "site-b",
        "target_name": "big-replica"}, format="json").status_code == 201
    app.control.purge()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        assert run_job(api, "/api/v1/replications/big-dr/sync/")["state"] == "succeeded"
    live = api.post("/api/v1/replicas/big-replica/promote/", {"name": "big-live"},
                    format="json").json()["path"]
    write_files(live, {f"on-b-{i}": os.urandom(8 * MiB) for i in range(4)})
    at_a, at_b = file_hashes(src), file_hashes(live)

    # B's stream is throttled (8 MiB/s) so the pull is caught mid-way
    r = api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {"replication": 8}},
                format="json")
    assert r.status_code == 200, r.json()
    proc = WorkerProcess(data_dir, tmp_path, lock_ttl=2)
    try:
        r = api.post("/api/v1/replications/big-dr/failback/", {}, format="json")
        assert r.status_code == 202, r.json()
        job_id = r.json()["id"]
        wait_for(lambda: "bytes pulled" in Job.objects.get(pk=job_id).message
                 and int(Job.objects.get(pk=job_id).message.split()[0]) >= 8 * MiB,
                 120, "the pull to get going")
    finally:
        proc.kill9()
    time.sleep(2.5)  # the dead run's lock expires (STRATA_PROTECTION_LOCK_TTL=2 there)
    assert file_hashes(src) == at_a
    assert Replication.objects.get(name="big-dr").failback["phase"] == "pull"

    api.put("/api/v1/io-budget/1/", {"class_rates_mbps": {}}, format="json")
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        job = run_job(api, "/api/v1/replications/big-dr/failback/", timeout=180)
    assert job["state"] == "succeeded", job
    assert job["result"]["resumed_at"] >= 8 * MiB
    assert file_hashes(src) == at_b


def test_runs_within_one_second_never_reuse_a_name_the_replica_holds(
        api, worker, live_server, monkeypatch):
    """Replication snapshots are named by the second; this side keeps only the newest, so
    a third run in the same second as the first once got the first one's name, found it on
    the replica and recorded it as sent without sending anything (the replica kept old
    data). With the clock stopped, every run sends and the replica follows the source."""
    import datetime
    import types

    from services.protection import replication

    frozen = datetime.datetime(2026, 11, 30, 12, 0, 0, tzinfo=datetime.timezone.utc)
    monkeypatch.setattr(replication, "timezone", types.SimpleNamespace(now=lambda: frozen))
    make_pool(api, "site-a")
    make_pool(api, "site-b")
    src = api.post("/api/v1/filesystems/", {"name": "ckpt", "pool": "site-a"},
                   format="json").json()["path"]
    token = api.token
    assert api.post("/api/v1/replication-peers/", {"name": "b", "url": live_server.url,
                                                   "token": token},
                    format="json").status_code == 201
    assert api.post("/api/v1/replications/", {
        "name": "dr", "filesystem": "ckpt", "peer": "b", "target_pool": "site-b",
        "target_name": "ckpt-replica"}, format="json").status_code == 201
    names = []
    for step in range(4):
        write_files(src, {"meta.json": f'{{"step": {step}}}'.encode(),
                          f"shard-{step}": os.urandom(256 * 1024)})
        job = run_job(api, "/api/v1/replications/dr/sync/")
        assert job["state"] == "succeeded", job
        assert job["result"]["bytes"] > 256 * 1024, job["result"]  # it was sent
        names.append(job["result"]["snapshot"])
        assert replica_hashes("ckpt-replica", names[-1]) == file_hashes(src)
    assert len(set(names)) == 4, names
