"""A ceph pool's file systems come back with every start of `strata up` (clean, and after
kill -9), before the services that use them: S3 on `--s3-pool` GETs what was PUT before,
smbclient reads the file written before through a share on the pool's ceph-fuse mount, and
a checkpoint committed before is still the latest and reads back by hash. With
its ceph-fuse killed while running, the pool turns offline with the reason and its mount
comes back by itself; while unmounted, its mountpoint cannot be written. With the Ceph
cluster down during the start, health shows the pool being attached on a back-off, S3 waits,
and everything comes back once the cluster does. Prints what a
restart costs: the time from the start to S3 answering on a ceph pool (tests/
test_strata_up_crash.py prints it for a local pool)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
import uuid

import pytest

from tests.appliance import Appliance
from tests.ceph import ceph_pool_body
from tests.kit import wait_for
from tests.test_daemon_restarts import created, pattern, rest

pytestmark = pytest.mark.root

KiB = 1024
START_TIMEOUT = 300       # bounds, not measures: the machine is shared
BACK_WITHIN = 180


def s3_client(app):
    import boto3
    from botocore.config import Config

    creds = app.credentials
    return boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                        aws_access_key_id=creds["s3_access_key"],
                        aws_secret_access_key=creds["s3_secret_key"], region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}, connect_timeout=2,
                                      read_timeout=20))


def start_until_s3(app) -> float:
    """Start `strata up`; seconds from the start until S3 answers a listing."""
    t0 = time.monotonic()
    app.start(timeout=START_TIMEOUT)
    s3 = s3_client(app)
    wait_for(lambda: _lists(s3), START_TIMEOUT, "S3 answering")
    return time.monotonic() - t0


def _lists(s3) -> bool:
    try:
        s3.list_buckets()
        return True
    except Exception:
        return False


def _succeeds(check) -> bool:
    try:
        check()
        return True
    except Exception:  # noqa: BLE001 - not yet
        return False


def pool_row(app, name: str) -> dict:
    status, row = rest(app, "GET", f"pools/{name}/")
    assert status == 200, row
    return row


def pool_health(app, name: str) -> dict:
    status, answer = rest(app, "GET", "health")
    return (answer or {}).get("pools", {}).get(name, {}) if status == 200 else {}


@pytest.fixture
def smb_user():
    from services.file.tests.plane_support import drop_unix_user, new_user_name

    user = new_user_name()
    yield user
    drop_unix_user(user)


def test_ceph_pool_file_systems_come_back_after_every_restart(ceph_cluster, smb_user, tmp_path):
    pool = f"rs{uuid.uuid4().hex[:6]}"
    app = Appliance(pool_size="1G", extra_args=["--s3-pool", pool])
    try:
        app.start(timeout=START_TIMEOUT)      # S3 waits: its pool does not exist yet
        os.chmod(app.data_dir, 0o755)         # SMB users must reach the share's path
        created(app, "pools/", ceph_pool_body(ceph_cluster, pool, redundancy="replicated:3",
                                              failure_domain="host"))
        created(app, "smb-users/", {"username": smb_user, "password": "Strata-pw-1"})
        created(app, "filesystems/", {"name": "docs", "pool": pool, "owner": smb_user,
                                      "mode": "0750"})
        created(app, "smb-shares/", {"name": "docs", "filesystem": "docs",
                                     "valid_users": [smb_user]})

        def smb(command: str) -> None:
            done = subprocess.run(
                ["smbclient", "//127.0.0.1/docs", "-p", str(app.smb_port), "-U",
                 f"{smb_user}%Strata-pw-1", "-m", "SMB3", "-c", command],
                capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr

        # the gateway's file system is made on the ceph pool by the next start
        app.stop()
        first = start_until_s3(app)
        s3 = s3_client(app)
        s3.create_bucket(Bucket="kept")
        for i in range(5):
            s3.put_object(Bucket="kept", Key=f"obj-{i}", Body=pattern(i, 64 * KiB))
        (tmp_path / "doc").write_bytes(pattern(99, 64 * KiB))
        smb(f"put {tmp_path / 'doc'} doc")
        # a checkpoint version written through the pool's local path and committed
        created(app, "filesystems/", {"name": "ckpt", "pool": pool})
        created(app, "checkpoint-jobs/", {"name": "job", "filesystem": "ckpt"})
        version = created(app, "checkpoint-jobs/job/versions/", {"step": 100})
        shard = pattern(7, 256 * KiB)
        os.makedirs(version["path"], exist_ok=True)
        with open(os.path.join(version["path"], "shard-0"), "wb") as f:
            f.write(shard)
            os.fsync(f.fileno())
        done = created(app, f"checkpoint-jobs/job/versions/{version['id']}/commit/",
                       {"manifest": [{"name": "shard-0", "size": len(shard),
                                      "sha256": hashlib.sha256(shard).hexdigest()}]})
        assert done["state"] == "committed", done

        def everything_reads_back() -> None:
            s3 = s3_client(app)
            for i in range(5):
                assert s3.get_object(Bucket="kept", Key=f"obj-{i}")["Body"].read() == \
                    pattern(i, 64 * KiB), i
            got = tmp_path / "got"
            got.unlink(missing_ok=True)
            smb(f"get doc {got}")
            assert got.read_bytes() == pattern(99, 64 * KiB)
            status, latest = rest(app, "GET", "checkpoint-jobs/job/latest/")
            assert status == 200 and latest["id"] == version["id"], latest
            with open(os.path.join(latest["path"], "shard-0"), "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == hashlib.sha256(shard).hexdigest()
            assert pool_row(app, pool)["state"] == "online"

        out = app.stop()
        assert f"pool {pool}: released" in out, out
        mountpoint = app.data_dir / "pools" / pool
        # unmounted, the mountpoint is a plain directory nobody can write into
        with pytest.raises(PermissionError):
            (mountpoint / "stray").write_bytes(b"lands on the root disk")
        clean = start_until_s3(app)
        everything_reads_back()

        app.proc.kill()
        app.proc.wait()
        killed = start_until_s3(app)
        everything_reads_back()

        # ceph-fuse killed while running: offline with the reason, then back by itself
        pidfile = app.data_dir / "run" / f"ceph-fuse-{pool}.pid"
        os.kill(int(pidfile.read_text().split()[0]), signal.SIGKILL)
        seen = wait_for(lambda: pool_health(app, pool).get("state") == "offline"
                        and pool_health(app, pool), 60, "the pool offline in health")
        assert "ceph-fuse" in str(seen.get("detail")), seen
        wait_for(lambda: pool_row(app, pool)["state"] == "online"
                 and pool_health(app, pool).get("state") == "online", BACK_WITHIN,
                 "the pool attached again by itself")
        # the gateway's open files were on the dead mount: it stops, and is started again
        # on the new one
        wait_for(lambda: _succeeds(everything_reads_back), BACK_WITHIN,
                 "S3 and SMB reading back after the pool was attached again")
        s3_record = json.loads((app.data_dir / "run" / "daemons.json").read_text())["s3"]
        assert s3_record["restarts"] >= 1 and s3_record["last_exit"]["code"] == 75, s3_record

        # the Ceph cluster down during the start: the start goes on, S3 waits, health says
        # how the pool is being attached; once the cluster is back, all of it is
        app.stop()
        ceph_cluster.down()
        try:
            app.start(timeout=START_TIMEOUT)
            trying = wait_for(lambda: pool_health(app, pool).get("attach"), 120,
                              "the attach back-off in health")
            assert trying["tries"] >= 1 and trying["retry_in_s"] >= 10 and trying["error"], \
                trying
            assert pool_row(app, pool)["state"] != "online"
            assert not _lists(s3_client(app))       # S3 never serves an empty directory
        finally:
            ceph_cluster.up()
        t0 = time.monotonic()
        wait_for(lambda: _lists(s3_client(app)), BACK_WITHIN + 300, "S3 once Ceph is back")
        print(f"\nS3 answering {time.monotonic() - t0:.1f} s after the Ceph cluster was back")
        everything_reads_back()
        print(f"\nstart to S3 answering on a ceph pool: {first:.1f} s (first), {clean:.1f} s "
              f"after a clean stop, {killed:.1f} s after kill -9")
    finally:
        if app.proc and app.proc.poll() is None:
            with contextlib.suppress(Exception):
                app.stop()
        app.destroy()
