"""The spdk dataplane driver on a real nvmf_tgt (tests/spdk_support.py: one per session, blank
per test).

Faults a real target cannot be made to produce on demand (malformed replies, chosen error
codes, PCIe NVMe devices) are in test_spdk_rpc_faults.py, against the fake.
"""

import json
import os
from pathlib import Path

import pytest

from dataplane import DeviceSpec
from dataplane.errors import (
    AlreadyExists,
    InsufficientDevices,
    InUse,
    InvalidArgument,
    NotFound,
    Offline,
    Unsupported,
)
from dataplane.spdk.driver import SpdkDriver
from dataplane.spdk.rpc import SpdkRpcError
from dataplane.spdk.target import SpdkTarget
from plumbing.process import free_port

MiB = 1 << 20


@pytest.fixture
def drv(blank_target, tmp_path):
    d = SpdkDriver(tmp_path / "state", rpc_socket=str(blank_target.rpc_socket), timeout=30)
    yield d
    d.rpc.close()


def lvol(drv, alias):
    return drv.rpc.call("bdev_get_bdevs", name=alias)[0]["driver_specific"]["lvol"]


def test_volumes_snapshots_clones_resize_delete(drv):
    pool = drv.create_pool("p1", [DeviceSpec("image:256M")])
    assert pool.health == "online" and pool.driver == "spdk" and pool.size_bytes > 200 * MiB
    image = Path(drv.rpc.call("bdev_get_bdevs", name="p1-d0")[0]["driver_specific"]["aio"]
                 ["filename"])
    assert image.stat().st_size == 256 * MiB
    vol = drv.create_volume("p1", "vm1", 10 * MiB)
    assert (vol.path, vol.size_bytes, vol.used_bytes) == ("p1/vm1", 10 * MiB, 0)
    assert lvol(drv, "p1/vm1")["thin_provision"] is True

    snap = drv.create_snapshot("p1", "volume", "vm1", "daily")
    assert snap.path == "p1/vm1@daily"
    # SPDK's way: the snapshot takes the clusters, the volume becomes its clone
    assert lvol(drv, "p1/vm1@daily")["snapshot"] and lvol(drv, "p1/vm1@daily")["clones"] == ["vm1"]
    assert lvol(drv, "p1/vm1")["base_snapshot"] == "vm1@daily"
    clone = drv.clone_snapshot("p1", "volume", "vm1", "daily", "vm2")
    assert clone.size_bytes == 10 * MiB
    assert drv.list_volumes("p1") == ["vm1", "vm2"]
    assert [s.name for s in drv.list_snapshots("p1", "volume", "vm1")] == ["daily"]
    with pytest.raises(AlreadyExists):
        drv.create_snapshot("p1", "volume", "vm1", "daily")
    with pytest.raises(AlreadyExists):
        drv.create_volume("p1", "vm2", MiB)

    assert drv.resize_volume("p1", "vm1", 30 * MiB).size_bytes == 30 * MiB
    with pytest.raises(InvalidArgument, match="shrink"):
        drv.resize_volume("p1", "vm1", 5 * MiB)

    # vm2 depends on vm1's snapshot: neither the snapshot nor vm1 can go
    with pytest.raises(InUse, match="vm2"):
        drv.delete_snapshot("p1", "volume", "vm1", "daily")
    with pytest.raises(InUse, match="vm2"):
        drv.delete_volume("p1", "vm1")
    assert drv.list_volumes("p1") == ["vm1", "vm2"]
    # a snapshot of the clone does not hide it: vm2@x is vm2's lineage
    drv.create_snapshot("p1", "volume", "vm2", "x")
    with pytest.raises(InUse, match="vm2"):
        drv.delete_volume("p1", "vm1")
    drv.delete_volume("p1", "vm2")
    drv.delete_volume("p1", "vm1")
    assert drv.list_volumes("p1") == []
    with pytest.raises(NotFound):
        drv.volume_info("p1", "vm1")
    drv.destroy_pool("p1")
    assert drv.list_pools() == [] and drv.rpc.call("bdev_lvol_get_lvstores") == []
    assert not image.exists()


def test_snapshot_delete_merges_into_the_volume(drv):
    drv.create_pool("p1", [DeviceSpec("image:64M")])
    drv.create_volume("p1", "a", 4 * MiB)
    drv.create_snapshot("p1", "volume", "a", "s1")
    drv.create_snapshot("p1", "volume", "a", "s2")
    assert lvol(drv, "p1/a@s2")["base_snapshot"] == "a@s1"
    drv.delete_snapshot("p1", "volume", "a", "s1")      # its one child is a's own chain
    assert [s.name for s in drv.list_snapshots("p1", "volume", "a")] == ["s2"]
    assert "base_snapshot" not in lvol(drv, "p1/a@s2") or not lvol(drv, "p1/a@s2")["base_snapshot"]
    with pytest.raises(NotFound):
        drv.delete_snapshot("p1", "volume", "a", "s1")


def test_capabilities_and_unsupported_features(drv):
    caps = drv.capabilities()
    assert caps["volumes"] and not caps["filesystems"] and not caps["send_receive"]
    assert caps["clones_depend_on_snapshot"] is True
    assert set(caps["features_off"]) >= {"filesystems", "send_receive", "scrub"}
    drv.create_pool("p1", [DeviceSpec("malloc:64M")])
    for call in (lambda: drv.create_filesystem("p1", "fs1"),
                 lambda: drv.scrub_pool("p1"),
                 lambda: drv.send_snapshot("p1", "volume", "v", "s")):
        with pytest.raises(Unsupported):
            call()
    assert drv.list_filesystems("p1") == []
    with pytest.raises(NotFound):
        drv.create_snapshot("p1", "filesystem", "fs1", "s")


def test_bad_input_leaves_nothing_on_the_target(drv, tmp_path):
    before = {b["name"] for b in drv.rpc.call("bdev_get_bdevs")}
    with pytest.raises(InsufficientDevices):
        drv.create_pool("m", [DeviceSpec("image:64M")], redundancy="mirror")
    with pytest.raises(InvalidArgument):
        drv.create_pool("m", [DeviceSpec("image:64M")], redundancy="raid10")
    with pytest.raises(InvalidArgument, match="device"):
        drv.create_pool("m", [DeviceSpec("relative/path")])
    # a block device that does not exist: SPDK refuses the AIO bdev
    with pytest.raises((NotFound, InvalidArgument, SpdkRpcError)) as err:
        drv.create_pool("m", [DeviceSpec("image:64M"), DeviceSpec("/dev/strata-no-such-disk")],
                        redundancy="mirror")
    assert "bdev_aio_create" in str(err.value)
    assert drv.list_pools() == [] and drv.rpc.call("bdev_lvol_get_lvstores") == []
    assert {b["name"] for b in drv.rpc.call("bdev_get_bdevs")} == before
    assert not any(Path(drv.devices_dir).glob("*.img"))

    drv.create_pool("p1", [DeviceSpec("image:64M")])
    with pytest.raises(AlreadyExists):
        drv.create_pool("p1", [DeviceSpec("image:64M")])
    with pytest.raises(InvalidArgument):
        drv.create_volume("p1", "v", 0)
    # a thick write that cannot fit: the store has about 60 clusters of 1 MiB
    with pytest.raises(InvalidArgument, match="no free clusters|space"):
        drv.rpc.call("bdev_lvol_create", lvol_name="thick", size_in_mib=1024,
                     thin_provision=False, lvs_name="p1")
    assert drv.list_volumes("p1") == []


def test_mirror_pool_comes_back_after_a_target_restart(tmp_path):
    """A target of its own: restarted, it knows nothing until the pool's bdevs come back;
    then SPDK loads the lvol store from them, with every volume and snapshot."""
    target = SpdkTarget(tmp_path / "tgt").start()
    try:
        drv = SpdkDriver(tmp_path / "state", rpc_socket=str(target.rpc_socket), timeout=30)
        m = drv.create_pool("m", [DeviceSpec("image:64M"), DeviceSpec("image:64M")],
                            redundancy="mirror")
        raid = drv.rpc.call("bdev_get_bdevs", name="m-raid")[0]
        assert raid["driver_specific"]["raid"]["raid_level"] == "raid1"
        assert 50 * MiB < m.size_bytes < 64 * MiB
        drv.create_volume("m", "v", 8 * MiB)
        drv.create_snapshot("m", "volume", "v", "s")

        target.kill()
        drv.rpc.close()
        target.start()
        assert drv.pool_info("m").health == "offline"
        with pytest.raises(Offline):
            drv.list_volumes("m")
        assert drv.activate_pool("m").health == "online"
        assert drv.list_volumes("m") == ["v"]
        assert [s.name for s in drv.list_snapshots("m", "volume", "v")] == ["s"]
        assert drv.volume_info("m", "v").size_bytes == 8 * MiB
        drv.rpc.close()
    finally:
        target.stop()
    assert not Path(f"/var/run/dpdk/spdk_pid{target.pid}").exists()


def test_qos_limits_are_live_on_the_bdev(drv):
    drv.create_pool("p1", [DeviceSpec("malloc:64M")])
    drv.create_volume("p1", "v", 8 * MiB)
    drv.create_volume("p1", "idle", 8 * MiB)
    drv.export_volume_nvmf("p1", "v", hosts=None, trsvcid=free_port())
    limits = drv.set_volume_qos("p1", "v", rw_ios_per_sec=5000, r_mbytes_per_sec=100)
    assert limits["rw_ios_per_sec"] == 5000 and limits["r_mbytes_per_sec"] == 100
    live = drv.rpc.call("bdev_get_bdevs", name="p1/v")[0]["assigned_rate_limits"]
    assert live["rw_ios_per_sec"] == 5000 and live["r_mbytes_per_sec"] == 100
    assert drv.set_volume_qos("p1", "v", rw_ios_per_sec=0)["rw_ios_per_sec"] == 0
    with pytest.raises(InvalidArgument, match="steps of 1000"):
        drv.set_volume_qos("p1", "v", rw_ios_per_sec=1500)
    # a volume nobody has open takes its first limits, but SPDK changes them only once open
    assert drv.set_volume_qos("p1", "idle", w_mbytes_per_sec=10)["w_mbytes_per_sec"] == 10
    with pytest.raises(InUse, match="only while it is exported"):
        drv.set_volume_qos("p1", "idle", w_mbytes_per_sec=20)
    drv.unexport_volume_nvmf("p1", "v")


def test_unknown_rpc_and_no_target_are_clear_errors(drv, tmp_path):
    with pytest.raises(Unsupported, match="does not know the RPC bdev_does_not_exist"):
        drv.rpc.call("bdev_does_not_exist")
    d = SpdkDriver(tmp_path / "other", rpc_socket=str(tmp_path / "nothing.sock"), timeout=2)
    with pytest.raises(SpdkRpcError, match="is it running"):
        d.create_pool("p1", [DeviceSpec("malloc:64M")])


def test_target_runs_in_interrupt_mode_without_hugepages(spdk_target):
    argv = Path(f"/proc/{spdk_target.pid}/cmdline").read_bytes().split(b"\0")
    assert b"--no-huge" in argv and b"--interrupt-mode" in argv
    cfg = spdk_target.saved_config()
    iobuf = next(s for s in cfg["subsystems"] if s["subsystem"] == "iobuf")
    opts = next(c["params"] for c in iobuf["config"] if c["method"] == "iobuf_set_options")
    assert opts["small_pool_count"] == 2048 and opts["large_pool_count"] == 256
    status = dict(line.split(":", 1) for line in
                  Path(f"/proc/{spdk_target.pid}/status").read_text().splitlines() if ":" in line)
    assert int(status["VmRSS"].split()[0]) < 400 * 1024      # kB: well under the 512 MiB default
    json.dumps(cfg)
    assert os.path.exists(spdk_target.rpc_socket)
