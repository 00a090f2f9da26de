"""`strata up` ended the hard way (kill -9, as the OOM killer or an impatient caller does)
takes every process of its run with it; the next start finds what an earlier run left and
ends it, saying so, and runs one of each daemon; a second `strata up` on the same data
directory is refused; a stop ends a child that no longer answers (tgtd frozen with SIGSTOP:
neither tgtadm nor SIGTERM reach it) and says so. Real daemons, real clients (boto3, nfs-rs)."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest

from plumbing.rungroup import RunGroup, command_line, start_ticks
from tests.appliance import STRATA, ROOT, Appliance, embedded_env
from tests.kit import free_port, port_answers, wait_for
from tests.test_daemon_restarts import Load, created, pattern

pytestmark = pytest.mark.root

KiB = 1024
GONE_WITHIN = 60          # seconds after kill -9 by which nothing of the run may remain
STOP_WITHIN = 180         # a bound on a stop with a frozen child, not a measure
START_TIMEOUT = 300       # a loaded machine starts slowly


@pytest.fixture
def app():
    appliance = Appliance(pool_size="2G")
    yield appliance
    if appliance.proc and appliance.proc.poll() is None:
        with contextlib.suppress(Exception):
            appliance.stop()
    from services.file.daemons import nfs_server
    nfs_server(appliance.data_dir, {}).unbind_all()   # if strata up died: its btrfs binds
    appliance.destroy()


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def run_processes(app) -> dict[int, str]:
    """Every process on the machine that belongs to this appliance, wherever it runs (in the
    run's cgroup or not): pid -> what it is. Found by what only this appliance's processes
    name: its data directory or one of its ports."""
    data = str(app.data_dir) + "/"
    marks = (f"portal=127.0.0.1:{app.iscsi_port} ", f" --port {app.port} ",  # tgtd, web
             f" strata-{app.port}@")                                     # the Celery worker
    found = {}
    for pid in all_pids():
        argv = command_line(pid)
        line = " ".join(argv) + " "
        if not argv or start_ticks(pid) is None or pid == os.getpid():
            continue
        if "pytest" in line:
            continue
        if data in line or str(app.data_dir) in argv or any(m in line for m in marks):
            found[pid] = role(argv)
    return found


def role(argv: list[str]) -> str:
    line = " ".join(argv)
    for needle, name in (("redis-server", "redis"), ("tgtd", "tgtd"),
                         ("ganesha.nfsd", "ganesha"), ("qemu-storage-daemon", "qsd"),
                         ("smbd", "smbd"), ("--worker-fd", "s3-worker"),
                         ("services.object.serve", "s3"), ("services.object.gateway", "s3"),
                         (" beat", "beat"),
                         (" worker", "worker"), ("uvicorn", "web"),
                         ("plumbing.rungroup", "reaper"), (" node run ", "node agent"),
                         ("console.cli.main", "strata up"),
                         ("ceph-fuse", "ceph-fuse")):
        if needle in line:
            return name
    return os.path.basename(argv[0])


def listening(ports) -> list[int]:
    return [p for p in ports if port_answers(p)]


def app_ports(app) -> list[int]:
    return [app.port, app.s3_port, app.nfs_port, app.smb_port, app.iscsi_port, app.nbd_port]


def one_of_each(app) -> None:
    """Exactly one of each daemon of this appliance on the whole machine (beat starts a
    moment after the appliance answers: wait for it)."""
    names = ("redis", "tgtd", "ganesha", "qsd", "s3", "beat", "web", "strata up", "reaper",
             "node agent")

    def counts():
        roles = list(run_processes(app).values())
        return {name: roles.count(name) for name in names}

    with contextlib.suppress(AssertionError):
        wait_for(lambda: set(counts().values()) == {1}, 60, "one of each daemon")
    assert counts() == dict.fromkeys(names, 1), sorted(run_processes(app).values())


def s3_client(app):
    import boto3
    from botocore.config import Config

    creds = app.credentials
    return boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                        aws_access_key_id=creds["s3_access_key"],
                        aws_secret_access_key=creds["s3_secret_key"], region_name="us-east-1",
                        config=Config(retries={"max_attempts": 2, "mode": "standard"},
                                      connect_timeout=2, read_timeout=20))


def s3_answers(s3) -> bool:
    try:
        s3.list_buckets()
        return True
    except Exception:  # noqa: BLE001 - not yet: the gateway is starting
        return False


def test_kill9_under_writes_leaves_nothing_and_the_next_start_serves_every_write(app):
    pytest.importorskip("nfs_rs")
    from services.file.tests.nfs_client import connect, read_hash, sha, write_file

    app.start(timeout=START_TIMEOUT)
    one_of_each(app)
    s3 = s3_client(app)
    s3.create_bucket(Bucket="crash")
    created(app, "filesystems/", {"name": "crash"})
    created(app, "nfs-exports/", {"filesystem": "crash",
                                  "clients": ["127.0.0.1 rw no_root_squash"]})
    nfs = {}

    def nfs_write(i):
        if "c" not in nfs:
            nfs["c"] = connect(app.nfs_port, "/crash")
        try:
            write_file(nfs["c"], f"f-{i}", pattern(i, 64 * KiB))
        except Exception:
            nfs.pop("c", None)
            raise

    before = run_processes(app)
    with Load(lambda i: s3.put_object(Bucket="crash", Key=f"obj-{i}",
                                      Body=pattern(i, 64 * KiB))) as puts, \
            Load(nfs_write) as writes:
        puts.wait_acked(5)
        writes.wait_acked(5)
        app.proc.kill()
        app.proc.wait()
        t0 = time.monotonic()
        wait_for(lambda: not run_processes(app) and not listening(app_ports(app)),
                 GONE_WITHIN, "no process of the run left and no port held")
        print(f"everything of the run gone {time.monotonic() - t0:.1f} s after kill -9 "
              f"({len(before)} processes)")
    assert puts.acked and writes.acked
    assert not RunGroup(app.data_dir).leftovers()

    t0 = time.monotonic()
    app.start(timeout=START_TIMEOUT)
    s3 = s3_client(app)
    wait_for(lambda: s3_answers(s3), START_TIMEOUT, "S3 answering")
    print(f"start to S3 answering on a local pool after kill -9: {time.monotonic() - t0:.1f} s")
    one_of_each(app)
    for i in puts.acked:
        assert s3.get_object(Bucket="crash", Key=f"obj-{i}")["Body"].read() == \
            pattern(i, 64 * KiB), i
    with connect(app.nfs_port, "/crash") as c:
        for i in writes.acked:
            assert read_hash(c, f"f-{i}") == (64 * KiB, sha(pattern(i, 64 * KiB))), i


def test_second_up_refused_leftovers_ended_and_a_frozen_child_killed_at_stop(app):
    app.start(timeout=START_TIMEOUT)

    # a second strata up on the same data directory: refused at once, in one line
    second = subprocess.run(
        STRATA + ["--data-dir", str(app.data_dir), "up", "--port", str(free_port()),
                  "--s3-port", str(free_port()), "--nfs-port", str(free_port()),
                  "--smb-port", str(free_port()), "--iscsi-port", str(free_port()),
                  "--nbd-port", str(free_port())],
        env=embedded_env(), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert second.returncode == 1, second
    assert second.stderr.strip() == (f"strata up: {app.data_dir} is already served by strata "
                                     f"up (pid {app.proc.pid}); stop that one first"), second
    one_of_each(app)

    # strata up and its reaper both killed: tgtd ignores the SIGTERM its parent's death sends
    # it, and daemons' own children have no such tie; the next start must end them
    reaper = [pid for pid, what in run_processes(app).items() if what == "reaper"]
    os.kill(reaper[0], signal.SIGKILL)
    app.proc.kill()
    app.proc.wait()
    time.sleep(3)
    left = RunGroup(app.data_dir).leftovers()
    assert "tgtd" in {p.name for p in left}, left
    app.start(timeout=START_TIMEOUT)
    assert not any(p.alive() for p in left), left
    one_of_each(app)

    # a stop with tgtd frozen: neither its control socket nor SIGTERM reach it
    tgtd = [pid for pid, what in run_processes(app).items() if what == "tgtd"][0]
    os.kill(tgtd, signal.SIGSTOP)
    t0 = time.monotonic()
    app.proc.send_signal(signal.SIGINT)
    out, _ = app.proc.communicate(timeout=STOP_WITHIN)
    took = time.monotonic() - t0
    assert app.proc.returncode == 0, out
    assert start_ticks(tgtd) is None, out
    assert f"an earlier run of {app.data_dir} left" in out and "tgtd" in out, out
    assert "had to kill: " in out and "tgtd" in out.split("had to kill: ")[1], out
    assert not run_processes(app), run_processes(app)
    print(f"stop with a frozen tgtd took {took:.1f} s")
