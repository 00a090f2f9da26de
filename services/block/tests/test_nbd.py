"""NBD and vhost-user-blk exports through qemu-storage-daemon, checked with libnbd's real tools."""

import os
import subprocess
import time

import pytest

from services.block.tests.conftest import make_volume, random_file, sha256_file
from services.block.transports.base import ExportExists, ExportNotFound, QosLimits

MiB = 1 << 20


def nbdcopy(src, dst, *extra):
    return subprocess.run(["nbdcopy", *extra, src, dst], capture_output=True, text=True,
                          timeout=120)


def test_write_and_read_back_by_hash(qsd, workdir):
    vol = make_volume(workdir, "vol.raw", 64 * MiB)
    info = qsd.export("vol1", vol)
    assert info["protocol"] == "nbd" and info["name"] == "vol1" and info["port"] == qsd.nbd_port
    src, digest = random_file(workdir, "src.bin", 64 * MiB)
    cp = nbdcopy(src, info["uri"])
    assert cp.returncode == 0, cp.stderr
    out = os.path.join(workdir, "out.bin")
    make_volume(workdir, "out.bin", 0)
    cp = nbdcopy(info["uri"], out)
    assert cp.returncode == 0, cp.stderr
    assert sha256_file(out) == digest
    assert sha256_file(vol) == digest        # the bytes really are in the volume file
    size = subprocess.run(["nbdinfo", "--size", info["uri"]], capture_output=True, text=True)
    assert int(size.stdout) == 64 * MiB


def test_read_only_export_refuses_writes(qsd, workdir):
    vol = make_volume(workdir, "vol.raw", 8 * MiB)
    info = qsd.export("ro1", vol, read_only=True)
    src, _ = random_file(workdir, "src.bin", 8 * MiB)
    cp = nbdcopy(src, info["uri"])
    assert cp.returncode != 0
    assert "read" in cp.stderr.lower()       # nbdcopy says the destination is read-only
    assert sha256_file(vol) == sha256_file(make_volume(workdir, "zero.raw", 8 * MiB))
    ro = subprocess.run(["nbdinfo", "--json", info["uri"]], capture_output=True, text=True)
    assert '"is_read_only": true' in ro.stdout


def test_snapshot_exported_read_only_keeps_old_bytes(qsd, workdir):
    from dataplane import DeviceSpec, DirectoryDriver
    drv = DirectoryDriver(os.path.join(workdir, "dp"))          # a real dataplane volume
    drv.create_pool("p1", [DeviceSpec("image:256M")])
    vol = drv.create_volume("p1", "vm", 16 * MiB)
    live = qsd.export("live", vol.path)
    a, digest_a = random_file(workdir, "a.bin", 16 * MiB)
    b, digest_b = random_file(workdir, "b.bin", 16 * MiB)
    assert nbdcopy(a, live["uri"], "--flush").returncode == 0
    snap = drv.create_snapshot("p1", "volume", "vm", "s1")
    assert nbdcopy(b, live["uri"], "--flush").returncode == 0
    snap_info = qsd.export("vm-s1", snap.path, read_only=True)
    out_snap = make_volume(workdir, "out-snap.bin", 0)
    out_live = make_volume(workdir, "out-live.bin", 0)
    assert nbdcopy(snap_info["uri"], out_snap).returncode == 0
    assert nbdcopy(live["uri"], out_live).returncode == 0
    assert sha256_file(out_snap) == digest_a
    assert sha256_file(out_live) == digest_b
    qsd.unexport("vm-s1")
    qsd.unexport("live")
    drv.delete_volume("p1", "vm")
    drv.destroy_pool("p1")


def test_qos_write_limit_holds_and_changes_live(qsd, workdir):
    limit = 10 * 1000 * 1000                 # 10 MB/s
    total = 40 * 1000 * 1000                 # a bounded 40 MB copy, ~4 s at the limit
    vol = make_volume(workdir, "vol.raw", 64 * MiB)
    info = qsd.export("qos1", vol, qos=QosLimits(bps_write=limit))
    src, _ = random_file(workdir, "src.bin", total)
    start = time.monotonic()
    cp = nbdcopy(src, info["uri"], "--flush")
    elapsed = time.monotonic() - start
    assert cp.returncode == 0, cp.stderr
    rate = total / elapsed
    # correctness of the limit, not a speed claim: the copy ran at 10 MB/s +-15 %
    assert 0.85 * limit <= rate <= 1.15 * limit, f"rate {rate / 1e6:.2f} MB/s"
    limits = qsd.qmp("qom-get", {"path": "qos-qos1", "property": "limits"})
    assert limits["bps-write"] == limit
    qsd.set_qos("qos1", QosLimits(iops_read=500, bps_read=20 * 1000 * 1000))
    limits = qsd.qmp("qom-get", {"path": "qos-qos1", "property": "limits"})
    assert limits["bps-write"] == 0 and limits["bps-read"] == 20_000_000
    assert limits["iops-read"] == 500


def test_resize_is_seen_without_changing_the_export(qsd, workdir):
    vol = make_volume(workdir, "vol.raw", 16 * MiB)
    info = qsd.export("grow", vol)
    a, digest = random_file(workdir, "a.bin", 16 * MiB)
    assert nbdcopy(a, info["uri"]).returncode == 0
    os.truncate(vol, 48 * MiB)               # the dataplane grew the volume
    assert qsd.resize("grow") == 48 * MiB
    assert qsd.connection_info("grow") == info
    size = subprocess.run(["nbdinfo", "--size", info["uri"]], capture_output=True, text=True)
    assert int(size.stdout) == 48 * MiB
    out = make_volume(workdir, "out.bin", 0)
    assert nbdcopy(info["uri"], out).returncode == 0
    assert sha256_file(out, 16 * MiB) == digest


def test_vhost_user_blk_socket_and_bookkeeping(qsd, workdir):
    vol = make_volume(workdir, "vol.raw", 8 * MiB)
    info = qsd.export("vm1", vol, protocol="vhost-user-blk")
    assert os.path.exists(info["socket"])
    exports = {e["id"]: e for e in qsd.qmp("query-block-exports")}
    assert exports["vm1"]["type"] == "vhost-user-blk"
    os.truncate(vol, 16 * MiB)
    assert qsd.resize("vm1") == 16 * MiB
    with pytest.raises(ExportExists):
        qsd.export("vm1", make_volume(workdir, "other.raw", MiB))
    qsd.unexport("vm1")
    assert not os.path.exists(info["socket"])
    assert qsd.health()["exports"] == 0
    with pytest.raises(ExportNotFound):
        qsd.unexport("vm1")


def test_exports_come_back_after_a_restart(qsd, workdir):
    vol = make_volume(workdir, "vol.raw", 4 * MiB)
    info = qsd.export("keep", vol, qos=QosLimits(iops_total=1000))
    qsd.stop()
    qsd.start()
    assert qsd.health()["running"] and qsd.list_exports() == ["keep"]
    size = subprocess.run(["nbdinfo", "--size", info["uri"]], capture_output=True, text=True)
    assert int(size.stdout) == 4 * MiB
    assert qsd.qmp("qom-get", {"path": "qos-keep", "property": "limits"})["iops-total"] == 1000


def test_a_restarted_plane_adopts_its_running_daemon(qsd, workdir):
    from services.block.transports.qsd import QemuStorageDaemon
    vol = make_volume(workdir, "vol.raw", 4 * MiB)
    info = qsd.export("kept", vol)
    proc = qsd._proc.proc
    qsd._qmp.close()       # the plane process dies: its QMP connection goes, the daemon stays
    # a new plane process builds a new object on the same state dir while the daemon runs
    again = QemuStorageDaemon(qsd.state_dir, nbd_port=qsd.nbd_port)
    again.start()
    try:
        assert again.health()["running"] and again.list_exports() == ["kept"]
        assert again.connection_info("kept") == info
        again.export("more", make_volume(workdir, "more.raw", MiB), read_only=True)
        assert {e["id"] for e in again.qmp("query-block-exports")} == {"kept", "more"}
        assert proc.poll() is None                 # still the one daemon
    finally:
        again.stop()                               # QMP quit: the daemon exits
        assert proc.wait(5) == 0


def test_qos_bound_is_what_qemu_storage_daemon_takes(qsd, workdir):
    # the API's bound on QoS fields (QOS_LIMIT_MAX) is qemu's own: it takes 10^15, not more
    from services.block.transports.base import QOS_LIMIT_MAX, TransportError
    qsd.export("qmax", make_volume(workdir, "vol.raw", MiB), qos=QosLimits(iops_total=1))
    qsd.set_qos("qmax", QosLimits(bps_total=QOS_LIMIT_MAX, iops_total=QOS_LIMIT_MAX))
    with pytest.raises(TransportError):
        qsd.set_qos("qmax", QosLimits(bps_total=QOS_LIMIT_MAX + 1))
