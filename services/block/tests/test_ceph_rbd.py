"""Block exports of RBD volumes on the session's development Ceph cluster, with real
clients: NBD through qemu-storage-daemon's rbd driver (nbdcopy), iSCSI through tgtd's rbd
backing store (qemu-img's iSCSI client), and an OSD ("host") killed with SIGKILL in the
middle of a write stream through NBD."""
import hashlib
import os
import subprocess
import threading

import pytest

from services.block.tests.conftest import make_volume, random_file, sha256_file
from services.block.tests.qemuio import QemuIo
from services.block.tests.test_iscsi import group, image_opts
from services.block.transports.base import QosLimits
from tests.ceph import driver_pool
from tests.kit import wait_for

pytestmark = pytest.mark.root
MiB = 1 << 20


@pytest.fixture
def ceph_pool(ceph_cluster):
    """(driver, pool name) of a replicated:3 pool spread over the cluster's hosts."""
    with driver_pool(ceph_cluster, "rbd", "blk") as found:
        yield found


def rbd_bytes(drv, pool, name, size) -> str:
    """SHA-256 of the image's first ``size`` bytes, read with librbd (not through the export)."""
    from tests.dataplane_support import read_at

    path = drv.volume_info(pool, name).path
    h = hashlib.sha256()
    for off in range(0, size, 4 * MiB):
        h.update(read_at(path, off, min(4 * MiB, size - off)))
    return h.hexdigest()


def test_nbd_export_of_an_rbd_volume_reads_back_by_hash(qsd, workdir, ceph_pool):
    drv, pool = ceph_pool
    vol = drv.create_volume(pool, "disk", 64 * MiB)
    info = qsd.export("rbd1", vol.path, qos=QosLimits(bps_write=200 * MiB))
    src, digest = random_file(workdir, "src.bin", 64 * MiB)
    cp = subprocess.run(["nbdcopy", "--flush", src, info["uri"]], capture_output=True,
                        text=True, timeout=180)
    assert cp.returncode == 0, cp.stderr
    out = make_volume(workdir, "out.bin", 0)
    cp = subprocess.run(["nbdcopy", info["uri"], out], capture_output=True, text=True,
                        timeout=180)
    assert cp.returncode == 0, cp.stderr
    assert sha256_file(out) == digest
    assert rbd_bytes(drv, pool, "disk", 64 * MiB) == digest     # the bytes are in the image
    qsd.set_qos("rbd1", QosLimits(bps_write=100 * MiB, iops_total=5000))  # live, kept
    with QemuIo(["-f", "raw", info["uri"]]) as io:
        io.check("write -P 0x5a 1M 64k")
        io.check("read -P 0x5a 1M 64k")
    # a snapshot exported read-only keeps the bytes of its time
    drv.create_snapshot(pool, "volume", "disk", "s1")
    with QemuIo(["-f", "raw", info["uri"]]) as io:
        io.check("write -P 0x33 1M 64k")
    snap = qsd.export("rbd1-s1", drv.list_snapshots(pool, "volume", "disk")[0].path,
                      read_only=True)
    with QemuIo(["-f", "raw", "-r", snap["uri"]]) as io:
        io.check("read -P 0x5a 1M 64k")
    qsd.unexport("rbd1-s1")
    qsd.unexport("rbd1")


def test_iscsi_export_of_an_rbd_volume_reads_back_by_hash(tgtd, workdir, ceph_pool):
    drv, pool = ceph_pool
    vol = drv.create_volume(pool, "lun", 32 * MiB)
    info = tgtd.export("rbd-lun", vol.path, host_group=group())
    live = tgtd.tgtadm.show_targets()[info["target_iqn"]]
    assert live.luns[info["lun"]].path == f"{drv._load(pool)['rados_pool']}/lun"
    src, digest = random_file(workdir, "src.bin", 32 * MiB)
    cp = subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-t", "none", src,
                         "--target-image-opts", image_opts(info)],
                        capture_output=True, text=True, timeout=180)
    assert cp.returncode == 0, cp.stderr
    out = os.path.join(workdir, "out.bin")
    cp = subprocess.run(["qemu-img", "convert", "-O", "raw", "--image-opts", image_opts(info),
                         out], capture_output=True, text=True, timeout=180)
    assert cp.returncode == 0, cp.stderr
    assert sha256_file(out) == digest
    assert rbd_bytes(drv, pool, "lun", 32 * MiB) == digest
    assert tgtd.plan().empty()
    tgtd.unexport("rbd-lun")


def test_killing_an_osd_mid_stream_loses_no_acknowledged_write(qsd, ceph_cluster, ceph_pool):
    """SIGKILL one OSD (the only one of CRUSH host host1) while a client writes through
    NBD: writes go on with 2 of 3 copies (min_size 2), every acknowledged write reads back,
    the pool shows degraded naming host1, and after the OSD restarts it recovers to
    healthy."""
    drv, pool = ceph_pool
    vol = drv.create_volume(pool, "stream", 64 * MiB)
    info = qsd.export("stream", vol.path)
    acked = {}                        # offset -> pattern byte, once qemu-io said it is done
    stop = threading.Event()
    errors = []

    def writer():
        with QemuIo(["-f", "raw", "-t", "none", info["uri"]], timeout=120) as io:
            n = 0
            while not stop.is_set() or n < 24:
                off, pattern = (n % 64) * MiB, (n * 7 + 1) % 255 + 1
                try:
                    io.check(f"write -P {pattern} {off} 1M")
                    io.check("flush")
                except (AssertionError, TimeoutError, EOFError) as exc:
                    errors.append(str(exc))
                    return
                acked[off] = pattern
                n += 1
                if n >= 400:
                    return

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(acked) < 8 and thread.is_alive():
            thread.join(0.1)
        ceph_cluster.kill_osd(1)
        before = len(acked)
        # "degraded" alone may still be the pool settling (PGs not yet active+clean) before the
        # monitors mark the killed OSD down: wait until the pool names the failed host
        degraded = wait_for(lambda: drv.pool_info(pool), 60, "the pool to name the failed host",
                            interval=0.5, until=lambda i: i.health == "degraded"
                            and "host1" in i.health_detail["failed_domains"])
        assert any("osd.1" in r and "host1" in r for r in degraded.health_detail["reasons"])
        assert degraded.health_detail["status"] in ("HEALTH_WARN", "HEALTH_ERR")
        down = [d for d in degraded.devices if d.path == "osd.1"]
        assert down and down[0].state == "missing" and down[0].fault_domain == "host1"
        while len(acked) < before + 16 and thread.is_alive():
            thread.join(0.1)
        assert len(acked) >= before + 16, errors     # writes went on with one host down
    finally:
        stop.set()
        thread.join(180)
        ceph_cluster.start_osd(1)
    assert not errors, errors
    # recovery is visible in the pool's health, then it is healthy again
    seen = []
    healthy = wait_for(lambda: drv.pool_info(pool), 120, "the pool to recover", interval=0.5,
                       until=lambda i: seen.append(i.health_detail) or i.health == "online")
    assert healthy.health_detail["failed_domains"] == []
    assert any(h.get("recovery") or h["pg_states"] != {"active+clean": 8} for h in seen), seen
    ceph_cluster.wait_healthy(120)
    with QemuIo(["-f", "raw", info["uri"]]) as io:
        for off, pattern in sorted(acked.items()):
            io.check(f"read -P {pattern} {off} 1M")
    qsd.unexport("stream")


