"""An OSD (the only one of CRUSH host host1) is killed with SIGKILL in the middle of a
checkpoint-style burst of shard files on a CephFS file system and of S3 PUTs to a gateway
whose data lives on CephFS: writes go on (2 of 3 copies, min_size 2), the pool shows
degraded naming host1, every acknowledged shard and object reads back by hash after the
OSD restarts and the pool is healthy again."""
import hashlib
import os
import threading
from pathlib import Path

import pytest

from tests.ceph import driver_pool
from tests.kit import Gateway, wait_for

pytestmark = pytest.mark.root
ACCESS, SECRET = "CEPHFSKILLKEY", "cephfs-kill-secret"


@pytest.fixture
def ceph_files_pool(ceph_cluster):
    """(driver, pool) of a replicated:3 ceph pool over the hosts, with file systems."""
    with driver_pool(ceph_cluster, "files", "fsk") as found:
        yield found


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_osd_killed_mid_checkpoint_burst_and_s3_puts_loses_no_acknowledged_write(
        ceph_cluster, ceph_files_pool, tmp_path, request):
    import boto3

    drv, pool = ceph_files_pool
    ckpt = Path(drv.create_filesystem(pool, "ckpt").path)
    for job in range(4):
        (ckpt / f"job-{job}").mkdir()
        drv.pin_directory(pool, f"fs/ckpt/job-{job}", job % 2)
    s3root = drv.create_filesystem(pool, "s3").path
    (tmp_path / "gw").mkdir()
    gw = Gateway(tmp_path / "gw", {ACCESS: {"secret_key": SECRET, "user": "u", "admin": True}},
                 data_root=s3root)
    request.addfinalizer(gw.stop)
    gw.start(timeout=30)
    s3 = boto3.client("s3", endpoint_url=gw.endpoint, aws_access_key_id=ACCESS,
                      aws_secret_access_key=SECRET, region_name="us-east-1")
    s3.create_bucket(Bucket="ckpt")
    shards, objects, errors = {}, {}, []
    stop = threading.Event()

    def burst():
        n = 0
        while not stop.is_set() and n < 2000:
            data = os.urandom(128 * 1024)
            path = ckpt / f"job-{n % 4}" / f"shard-{n}"
            try:
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                errors.append(f"{path}: {exc}")
                return
            shards[path] = sha(data)
            n += 1

    def puts():
        n = 0
        while not stop.is_set() and n < 2000:
            data = os.urandom(64 * 1024)
            try:
                s3.put_object(Bucket="ckpt", Key=f"obj-{n}", Body=data)
            except Exception as exc:  # noqa: BLE001 - any failure of an acknowledged path
                errors.append(f"obj-{n}: {exc}")
                return
            objects[f"obj-{n}"] = sha(data)
            n += 1

    threads = [threading.Thread(target=burst), threading.Thread(target=puts)]
    for t in threads:
        t.start()
    try:
        _until(lambda: len(shards) >= 8 and len(objects) >= 8, 60, errors)
        ceph_cluster.kill_osd(1)
        before = (len(shards), len(objects))
        # "degraded" alone may still be the pool settling (PGs not yet active+clean) before the
        # monitors mark the killed OSD down: wait until the pool names the failed host
        wait_for(lambda: drv.pool_info(pool), 60, "the pool to name the failed host",
                 interval=0.5, until=lambda i: i.health == "degraded"
                 and "host1" in i.health_detail["failed_domains"])
        # writes go on with one host down
        _until(lambda: len(shards) >= before[0] + 16 and len(objects) >= before[1] + 16, 120,
               errors)
    finally:
        stop.set()
        for t in threads:
            t.join(180)
        ceph_cluster.start_osd(1)
    assert not errors, errors
    healthy = wait_for(lambda: drv.pool_info(pool), 180, "the pool to recover", interval=0.5,
                       until=lambda i: i.health == "online")
    assert healthy.health_detail["failed_domains"] == []
    for path, digest in shards.items():
        assert sha(path.read_bytes()) == digest, path
    for key, digest in objects.items():
        assert sha(s3.get_object(Bucket="ckpt", Key=key)["Body"].read()) == digest, key
    ceph_cluster.wait_healthy(120)


def _until(check, timeout, errors):
    """Wait for the writers' progress, failing at once on an error of theirs."""
    def progressed():
        assert not errors, errors
        return check()

    wait_for(progressed, timeout, "the writers' progress", interval=0.2)
