"""Daemons that die come back: `kill -9` of each child of `strata up` while a real client uses
it. The supervisor starts it again, puts back what it held (targets, LUNs, exports, shares as
the database says), the health answer shows one restart and the signal, and everything the
client was told had succeeded reads back. One appliance serves every test of this module."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.appliance import Appliance
from tests.kit import wait_for

pytestmark = pytest.mark.root

KiB = 1024
RESTART_TIMEOUT = 300     # a bound, not a measure: this machine may be loaded


@pytest.fixture(scope="module")
def app():
    from services.file.daemons import nfs_server

    appliance = Appliance(pool_size="2G")
    try:
        yield appliance.start(timeout=300)  # a bound: a loaded machine starts slowly
    finally:
        if appliance.proc and appliance.proc.poll() is None:
            with contextlib.suppress(Exception):       # destroy below kills it
                appliance.stop()
        nfs_server(appliance.data_dir, {}).unbind_all()  # if strata up died: its btrfs binds
        appliance.destroy()


def rest(app, method: str, path: str, body=None, timeout: float = 60):
    creds = app.credentials
    req = urllib.request.Request(
        creds["api_url"] + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Token {creds['token']}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def created(app, path: str, body: dict) -> dict:
    status, row = rest(app, "POST", path, body)
    assert status in (200, 201, 202), (path, status, row)
    return row


def recorded(app) -> dict:
    """What `strata up` records of its children (run/daemons.json)."""
    return json.loads((app.data_dir / "run" / "daemons.json").read_text())


def health(app) -> dict:
    def answer():
        with urllib.request.urlopen(f"{app.url}/api/v1/health", timeout=10) as r:
            return json.load(r)
    return wait_for(lambda: _quiet(answer), 60, "the health answer")


def _quiet(fn):
    try:
        return fn()
    except (OSError, ValueError):
        return None


class Load:
    """A client at work in a thread: ``step(i)`` again and again (i = 0, 1, ...); the i
    whose step returned are acknowledged, a failed step is tried again (the daemon may be
    down) after a short pause."""

    def __init__(self, step, limit: int = 10_000, pause: float = 0.05):
        self.step, self.limit, self.pause = step, limit, pause
        self.acked: list[int] = []
        self.errors: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = 0
        while not self.done.is_set() and i < self.limit:
            try:
                self.step(i)
            except Exception as exc:  # the daemon is being restarted: try again
                self.errors.append(f"{i}: {exc}"[:300])
                time.sleep(0.2)
                continue
            self.acked.append(i)
            i += 1
            time.sleep(self.pause)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(120)

    def wait_acked(self, n: int, timeout: float = RESTART_TIMEOUT) -> None:
        try:
            wait_for(lambda: len(self.acked) >= min(n, self.limit) or not self.thread.is_alive(),
                     timeout, f"{n} acknowledged steps")
        except AssertionError as exc:  # the errors of the end of the wait, not of its start
            raise AssertionError(f"{exc} (last errors: {self.errors[-3:]})") from None
        assert len(self.acked) >= min(n, self.limit), self.errors[-5:]


def kill9_while(app, name: str, load: Load) -> None:
    """With the client at work: kill -9 the daemon, wait until it was started again and the
    client's steps succeed again."""
    load.wait_acked(2)
    before = recorded(app)[name]
    assert before["state"] == "running" and before["restarts"] == 0, before
    os.kill(before["pid"], signal.SIGKILL)
    wait_for(lambda: recorded(app)[name]["restarts"] == 1
             and recorded(app)[name]["state"] == "running", RESTART_TIMEOUT,
             f"{name} started again")
    try:
        load.wait_acked(len(load.acked) + 2)
    except AssertionError as exc:  # say what the supervisor recorded and what the daemon said
        log = app.data_dir / "log" / f"{name}.log"
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
        raise AssertionError(f"{exc}\n{name}: {recorded(app)[name]}\n{log}:\n{tail}") from None


def assert_restarted_once(app, name: str) -> dict:
    """The health answer shows the restart and the signal that ended the daemon."""
    daemon = health(app)["daemons"][name]
    assert daemon["state"] == "running" and daemon["restarts"] == 1, daemon
    assert daemon["last_exit"]["signal"] == "SIGKILL" and daemon["last_exit"]["at"], daemon
    return daemon


def pattern(i: int, size: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (size // 32)


# --------------------------------------------------------------------------- object, web


def test_s3_gateway_killed_during_a_put_loop_keeps_every_acknowledged_object(app):
    import boto3
    from botocore.config import Config

    creds = app.credentials
    s3 = boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                      aws_access_key_id=creds["s3_access_key"],
                      aws_secret_access_key=creds["s3_secret_key"], region_name="us-east-1",
                      config=Config(retries={"max_attempts": 10, "mode": "standard"},
                                    connect_timeout=2, read_timeout=30))
    s3.create_bucket(Bucket="restarts")
    with Load(lambda i: s3.put_object(Bucket="restarts", Key=f"obj-{i}",
                                      Body=pattern(i, 64 * KiB))) as load:
        kill9_while(app, "s3", load)
    for i in load.acked:
        body = s3.get_object(Bucket="restarts", Key=f"obj-{i}")["Body"].read()
        assert body == pattern(i, 64 * KiB), i
    assert_restarted_once(app, "s3")


def test_web_server_killed_during_rest_calls_keeps_every_acknowledged_row(app):
    def add_host(i):
        body = {"name": f"web-{i}", "iqn": f"iqn.2026-01.io.test:web-{i}"}
        status, row = rest(app, "POST", "hosts/", body, timeout=10)
        if status == 409:  # a try cut off by the kill was committed before its answer was sent
            status, row = rest(app, "GET", f"hosts/{body['name']}/", timeout=10)
            assert status == 200 and row["iqn"] == body["iqn"], (status, row)
            return
        assert status == 201, (status, row)

    with Load(add_host) as load:
        kill9_while(app, "web", load)
    status, page = rest(app, "GET", "hosts/?limit=1000")
    names = {h["name"] for h in (page["results"] if isinstance(page, dict) else page)}
    assert {f"web-{i}" for i in load.acked} <= names
    assert_restarted_once(app, "web")


# --------------------------------------------------------------------------- worker, beat, redis


def _job_load(app, prefix: str, jobs: int) -> tuple[Load, list[int]]:
    """A client queueing snapshot jobs (one schedule each: their snapshot names are per
    second) and the ids of the jobs accepted."""
    created(app, "filesystems/", {"name": prefix})
    for i in range(jobs):
        created(app, "snapshot-schedules/", {"name": f"{prefix}-{i}", "filesystem": prefix,
                                             "every_minutes": 600, "keep_last": 5})
    ids = []

    def run(i):
        status, job = rest(app, "POST", f"snapshot-schedules/{prefix}-{i}/run/", timeout=10)
        assert status == 202, (status, job)
        ids.append(job["id"])

    return Load(run, limit=jobs, pause=0.2), ids


def _every_job_ran(app, ids: list[int]) -> None:
    last = []

    def finished():
        last[:] = [rest(app, "GET", f"jobs/{i}/")[1] for i in ids]
        return last if all(r["state"] in ("succeeded", "failed", "cancelled")
                           for r in last) else None

    try:
        rows = wait_for(finished, RESTART_TIMEOUT, "every accepted job finished", interval=1)
    except AssertionError:
        states = [(r["id"], r["state"], r["message"]) for r in last]
        raise AssertionError(f"jobs not finished: {states}; worker: "
                             f"{recorded(app)['worker']}") from None
    # a job the killed worker was running is recorded as interrupted; every other one ran
    bad = [r for r in rows if r["state"] != "succeeded"
           and not r["error"].startswith("interrupted")]
    assert not bad, bad
    assert sum(r["state"] == "succeeded" for r in rows) >= len(rows) - 2, rows


def test_worker_killed_while_jobs_are_queued_runs_every_accepted_job(app):
    load, ids = _job_load(app, "wk", 6)
    with load:
        kill9_while(app, "worker", load)
        load.thread.join(RESTART_TIMEOUT)
    _every_job_ran(app, ids)
    assert health(app)["components"]["worker"]["state"] == "ok"
    assert_restarted_once(app, "worker")


def test_redis_killed_while_jobs_are_queued_loses_no_accepted_job(app):
    # the worker may exit too when its broker goes away (kombu, on a unix-socket URL): it is
    # then started again like any child; the jobs accepted before and after still run
    load, ids = _job_load(app, "rd", 6)
    with load:
        kill9_while(app, "redis", load)
        load.thread.join(RESTART_TIMEOUT)
    _every_job_ran(app, ids)
    wait_for(lambda: health(app)["components"]["worker"]["state"] == "ok", 60, "the worker")
    assert_restarted_once(app, "redis")


def test_beat_killed_is_started_again(app):
    with Load(lambda i: rest(app, "GET", "jobs/?limit=5", timeout=10)) as load:
        kill9_while(app, "beat", load)
    assert_restarted_once(app, "beat")
    # `strata health` tells the operator the same
    beat = json.loads(app.cli("health").stdout)["daemons"]["beat"]
    assert (beat["restarts"], beat["last_exit"]["signal"]) == (1, "SIGKILL"), beat


# --------------------------------------------------------------------------- block


def _volume_export(app, name: str, protocol: str) -> dict:
    created(app, "volumes/", {"name": name, "size_bytes": 16 << 20})
    return created(app, "block-exports/", {"volume": name, "protocol": protocol,
                                          "allow_any": True})


def _block_load(url: str, chunk: int = 64 * KiB, blocks: int = 200) -> Load:
    def write(i):
        subprocess.run(["qemu-io", "-f", "raw", "-c",
                        f"write -P {i % 250 + 1} {(i % blocks) * chunk} {chunk}", url],
                       check=True, capture_output=True, timeout=30)

    return Load(write, limit=blocks)


def _read_back(url: str, load: Load, tmp_path, chunk: int = 64 * KiB) -> None:
    out = tmp_path / "disk.raw"
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "raw", url, str(out)],
                   check=True, capture_output=True, timeout=120)
    data = out.read_bytes()
    for i in load.acked:
        assert data[i * chunk:(i + 1) * chunk] == bytes([i % 250 + 1]) * chunk, i


def test_tgtd_killed_under_iscsi_writes_gets_its_targets_back(app, tmp_path):
    export = _volume_export(app, "iscsi-vol", "iscsi")
    c = export["connection"]
    url = f"iscsi://{c['portal']}/{c['target_iqn']}/{c['lun']}"
    with _block_load(url) as load:
        kill9_while(app, "tgtd", load)
    _read_back(url, load, tmp_path)
    status, row = rest(app, "GET", f"block-exports/{export['id']}/")
    assert row["state"] == "online", row
    assert_restarted_once(app, "tgtd")
    assert health(app)["services"]["block"]["iscsi"]["state"] == "ok"


def test_qemu_storage_daemon_killed_under_nbd_writes_gets_its_exports_back(app, tmp_path):
    export = _volume_export(app, "nbd-vol", "nbd")
    url = export["connection"]["uri"]
    with _block_load(url) as load:
        kill9_while(app, "qemu-storage-daemon", load)
    _read_back(url, load, tmp_path)
    status, row = rest(app, "GET", f"block-exports/{export['id']}/")
    assert row["state"] == "online", row
    assert_restarted_once(app, "qemu-storage-daemon")
    assert health(app)["services"]["block"]["nbd"]["state"] == "ok"


# --------------------------------------------------------------------------- file


def test_ganesha_killed_under_nfs_writes_serves_the_export_again(app):
    pytest.importorskip("nfs_rs")
    from services.file.tests.nfs_client import connect, read_hash, sha, write_file

    created(app, "filesystems/", {"name": "nfsk"})
    created(app, "nfs-exports/", {"filesystem": "nfsk",
                                  "clients": ["127.0.0.1 rw no_root_squash"]})
    client = {}

    def write(i):
        if "c" not in client:
            client["c"] = connect(app.nfs_port, "/nfsk")
        try:
            write_file(client["c"], f"f-{i}", pattern(i, 64 * KiB))
        except Exception:
            client.pop("c", None)           # a new connection to the new daemon next time
            raise

    with Load(write) as load:
        kill9_while(app, "ganesha", load)
    with connect(app.nfs_port, "/nfsk") as c:
        for i in load.acked:
            assert read_hash(c, f"f-{i}") == (64 * KiB, sha(pattern(i, 64 * KiB))), i
    assert_restarted_once(app, "ganesha")


def test_smbd_killed_under_smb_writes_serves_the_share_again(app, tmp_path):
    from services.file.tests.plane_support import drop_unix_user, new_user_name

    user = new_user_name()
    os.chmod(app.data_dir, 0o755)    # mkdtemp made it 0700: SMB users could not reach in
    try:
        created(app, "smb-users/", {"username": user, "password": "Strata-pw-1"})
        created(app, "filesystems/", {"name": "smbk", "owner": user, "mode": "0750"})
        created(app, "smb-shares/", {"name": "smbk", "filesystem": "smbk",
                                     "valid_users": [user]})

        def smb(command: str):
            done = subprocess.run(
                ["smbclient", "//127.0.0.1/smbk", "-p", str(app.smb_port), "-U",
                 f"{user}%Strata-pw-1", "-m", "SMB3", "-c", command],
                capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stdout + done.stderr

        def put(i):
            local = tmp_path / f"f-{i}"
            local.write_bytes(pattern(i, 64 * KiB))
            smb(f"put {local} f-{i}")

        with Load(put) as load:
            kill9_while(app, "smbd", load)
        for i in load.acked:
            got = tmp_path / f"got-{i}"
            smb(f"get f-{i} {got}")
            assert got.read_bytes() == pattern(i, 64 * KiB), i
        assert_restarted_once(app, "smbd")
    finally:
        drop_unix_user(user)
