"""The spdk dataplane driver against the FAKE spdk_tgt (tests/fakes/spdk_server.py).

spdk_tgt cannot be installed on this machine, so these tests check the driver's calls
and its reading of SPDK's replies against a fake that keeps SPDK's state and error codes.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataplane import DeviceSpec  # noqa: E402
from dataplane.errors import (  # noqa: E402
    AlreadyExists,
    InsufficientDevices,
    InUse,
    InvalidArgument,
    NotFound,
    Offline,
    Unsupported,
)
from dataplane.spdk.driver import SpdkDriver  # noqa: E402
from dataplane.spdk.rpc import SpdkRpcError  # noqa: E402
from tests.fakes.spdk_server import FakeSpdk, FakeSpdkServer  # noqa: E402
from tests.kit import wait_for  # noqa: E402

MiB = 1 << 20
HOST_A = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
HOST_B = "nqn.2014-08.org.nvmexpress:uuid:66666666-7777-8888-9999-000000000000"


@pytest.fixture
def fake(tmp_path):
    srv = FakeSpdkServer(str(tmp_path / "spdk.sock"), nvme_devices={"0000:01:00.0": 1 << 30})
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def drv(fake, tmp_path):
    d = SpdkDriver(tmp_path / "state", rpc_socket=fake.socket_path, timeout=5)
    yield d
    d.rpc.close()


def lvol(fake, alias):
    return fake.state.find_bdev(alias)["driver_specific"]["lvol"]


def test_volumes_snapshots_clones_resize_delete(drv, fake):
    pool = drv.create_pool("p1", [DeviceSpec("image:256M")])
    assert pool.health == "online" and pool.driver == "spdk" and pool.size_bytes > 200 * MiB
    vol = drv.create_volume("p1", "vm1", 10 * MiB)
    assert (vol.path, vol.size_bytes, vol.used_bytes) == ("p1/vm1", 10 * MiB, 0)
    assert lvol(fake, "p1/vm1")["thin_provision"] is True
    fake.state.write_clusters("p1/vm1", 3)               # a client wrote 3 MiB
    assert drv.volume_info("p1", "vm1").used_bytes == 3 * MiB

    snap = drv.create_snapshot("p1", "volume", "vm1", "daily")
    assert snap.path == "p1/vm1@daily"
    # SPDK semantics: the snapshot takes the clusters, the volume becomes its clone
    assert lvol(fake, "p1/vm1@daily")["snapshot"] and lvol(fake, "p1/vm1@daily")["clones"] == ["vm1"]
    assert lvol(fake, "p1/vm1")["base_snapshot"] == "vm1@daily"
    clone = drv.clone_snapshot("p1", "volume", "vm1", "daily", "vm2")
    assert clone.size_bytes == 10 * MiB
    assert drv.list_volumes("p1") == ["vm1", "vm2"]
    assert [s.name for s in drv.list_snapshots("p1", "volume", "vm1")] == ["daily"]
    with pytest.raises(AlreadyExists):
        drv.create_snapshot("p1", "volume", "vm1", "daily")
    with pytest.raises(AlreadyExists):
        drv.create_volume("p1", "vm2", MiB)

    assert drv.resize_volume("p1", "vm1", 30 * MiB).size_bytes == 30 * MiB
    with pytest.raises(InvalidArgument):
        drv.resize_volume("p1", "vm1", 5 * MiB)

    # deleting vm1 takes its snapshot; vm2 (cloned from it) is inflated and keeps its data
    drv.delete_volume("p1", "vm1")
    assert drv.list_volumes("p1") == ["vm2"]
    assert lvol(fake, "p1/vm2")["clone"] is False
    assert drv.volume_info("p1", "vm2").used_bytes == 10 * MiB
    with pytest.raises(NotFound):
        drv.volume_info("p1", "vm1")
    with pytest.raises(InUse):
        drv.destroy_pool("p1")
    drv.delete_volume("p1", "vm2")
    drv.destroy_pool("p1")
    assert drv.list_pools() == [] and fake.state.lvstores == {}
    assert not any(Path(drv.devices_dir).glob("*.img"))


def test_snapshot_delete_merges_into_its_only_clone(drv, fake):
    drv.create_pool("p1", [DeviceSpec("malloc:64M")])
    drv.create_volume("p1", "a", 4 * MiB)
    drv.create_snapshot("p1", "volume", "a", "s1")
    drv.create_snapshot("p1", "volume", "a", "s2")
    assert lvol(fake, "p1/a@s2")["base_snapshot"] == "a@s1"
    drv.clone_snapshot("p1", "volume", "a", "s1", "b")
    drv.delete_snapshot("p1", "volume", "a", "s1")      # two children: b is inflated first
    assert [s.name for s in drv.list_snapshots("p1", "volume", "a")] == ["s2"]
    assert lvol(fake, "p1/b")["clone"] is False
    with pytest.raises(NotFound):
        drv.delete_snapshot("p1", "volume", "a", "s1")


def test_capabilities_and_unsupported_features(drv):
    caps = drv.capabilities()
    assert caps["volumes"] and not caps["filesystems"] and not caps["send_receive"]
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
    with pytest.raises(InvalidArgument):
        drv.create_filesystem("p1", "Bad Name")


def test_pools_on_nvme_and_mirror_and_restart(drv, fake, tmp_path):
    with pytest.raises(InsufficientDevices):
        drv.create_pool("m", [DeviceSpec("image:64M")], redundancy="mirror")
    with pytest.raises(InvalidArgument):
        drv.create_pool("m", [DeviceSpec("image:64M")], redundancy="raid10")
    m = drv.create_pool("m", [DeviceSpec("image:64M"), DeviceSpec("image:64M")],
                        redundancy="mirror")
    assert fake.state.bdevs["m-raid"]["driver_specific"]["raid"]["raid_level"] == "raid1"
    assert 50 * MiB < m.size_bytes < 64 * MiB
    n = drv.create_pool("n", [DeviceSpec("nvme:0000:01:00.0")])
    assert n.devices[0].size_bytes == 1 << 30
    with pytest.raises(NotFound):
        drv.create_pool("x", [DeviceSpec("nvme:0000:09:00.0")])
    assert "x" not in drv.list_pools()
    drv.create_volume("m", "v", 8 * MiB)
    drv.create_snapshot("m", "volume", "v", "s")

    # spdk_tgt restarts: a new process knows nothing until the pool's bdevs come back
    fake.stop()
    fresh = FakeSpdkServer(fake.socket_path, state=FakeSpdk()).start()
    try:
        drv.rpc.close()
        assert drv.pool_info("m").health == "offline"
        with pytest.raises(Offline):
            drv.list_volumes("m")
        assert drv.activate_pool("m").health == "online"
        assert drv.list_volumes("m") == ["v"]
        assert [s.name for s in drv.list_snapshots("m", "volume", "v")] == ["s"]
    finally:
        fresh.stop()


def test_nvmf_export_hosts_resize_and_refused_delete(drv, fake):
    drv.create_pool("p1", [DeviceSpec("image:128M")])
    drv.create_volume("p1", "db", 16 * MiB)
    info = drv.export_volume_nvmf("p1", "db", hosts=[HOST_A], traddr="127.0.0.1", trsvcid=4421)
    assert info["subsystem_nqn"] == "nqn.2026-01.io.strata:p1.db" and info["trsvcid"] == "4421"
    sub = fake.state.subsystems[info["subsystem_nqn"]]
    assert fake.state.transports["TCP"]["trtype"] == "TCP"
    assert [ns["bdev_name"] for ns in sub["namespaces"]] == ["p1/db"]
    assert sub["listen_addresses"][0]["traddr"] == "127.0.0.1"
    assert [h["nqn"] for h in sub["hosts"]] == [HOST_A] and not sub["allow_any_host"]

    out = drv.set_nvmf_hosts("p1", "db", [HOST_B])
    assert out["plan"] == {"add": [f"{info['subsystem_nqn']} host {HOST_B}"],
                           "remove": [f"{info['subsystem_nqn']} host {HOST_A}"]}
    assert [h["nqn"] for h in sub["hosts"]] == [HOST_B]

    drv.resize_volume("p1", "db", 64 * MiB)              # namespace grows in place
    assert [ns["bdev_name"] for ns in sub["namespaces"]] == ["p1/db"]
    assert fake.state.find_bdev("p1/db")["num_blocks"] * 512 == 64 * MiB

    with pytest.raises(InUse, match="exported over NVMe-oF"):
        drv.delete_volume("p1", "db")
    with pytest.raises(InvalidArgument):
        drv.export_volume_nvmf("p1", "db", hosts=["not-an-nqn"])

    # someone deleted the subsystem behind our back: reconcile puts it back
    fake.state.rpc_nvmf_delete_subsystem(info["subsystem_nqn"])
    plan = drv.reconcile_nvmf()
    assert f"subsystem {info['subsystem_nqn']}" in plan["add"]
    drv.unexport_volume_nvmf("p1", "db")
    assert info["subsystem_nqn"] not in fake.state.subsystems
    drv.delete_volume("p1", "db")


def test_qos_limits(drv, fake):
    drv.create_pool("p1", [DeviceSpec("malloc:64M")])
    drv.create_volume("p1", "v", 8 * MiB)
    limits = drv.set_volume_qos("p1", "v", rw_ios_per_sec=5000, r_mbytes_per_sec=100)
    assert limits["rw_ios_per_sec"] == 5000 and limits["r_mbytes_per_sec"] == 100
    assert ("bdev_set_qos_limit", {"name": "p1/v", "rw_ios_per_sec": 5000,
                                  "r_mbytes_per_sec": 100}) in fake.calls
    assert drv.set_volume_qos("p1", "v", rw_ios_per_sec=0)["rw_ios_per_sec"] == 0
    with pytest.raises(InvalidArgument, match="steps of 1000"):
        drv.set_volume_qos("p1", "v", rw_ios_per_sec=1500)


def test_failing_rpc_replies_become_specific_errors(drv, fake):
    drv.create_pool("p1", [DeviceSpec("malloc:64M")])
    fake.inject("bdev_lvol_create", error=(-28, "No space left on device"))
    with pytest.raises(InvalidArgument, match="bdev_lvol_create: No space left on device"):
        drv.create_volume("p1", "v", MiB)
    fake.inject("bdev_lvol_create", error=(-16, "Device or resource busy"))
    with pytest.raises(InUse, match="Device or resource busy"):
        drv.create_volume("p1", "v", MiB)
    fake.inject("bdev_lvol_create", error=(-32603, "Internal error"))
    with pytest.raises(SpdkRpcError, match="spdk_tgt refused bdev_lvol_create: Internal error"):
        drv.create_volume("p1", "v", MiB)
    with pytest.raises(Unsupported, match="does not know the RPC bdev_does_not_exist"):
        drv.rpc.call("bdev_does_not_exist")
    assert drv.create_volume("p1", "v", MiB).name == "v"    # and then it works


@pytest.mark.parametrize("fault, message", [
    ({"result": "x"}, "no 'result'"),
    ({"wrong_id": True}, "answered request"),
    ({"raw": b'{"jsonrpc": "2.0", "id": 7, "res'}, "no valid reply"),
    ({"hang_up": True}, "no valid reply"),
])
def test_malformed_rpc_replies_become_clear_errors(drv, fake, fault, message):
    drv.create_pool("p1", [DeviceSpec("malloc:64M")])
    drv.create_volume("p1", "v", MiB)
    fake.inject("bdev_lvol_resize", **fault)
    with pytest.raises(SpdkRpcError, match=message) as err:
        drv.resize_volume("p1", "v", 2 * MiB)
    assert err.value.code == "command_failed" and "bdev_lvol_resize" in str(err.value)
    # the driver reconnects and carries on
    assert drv.resize_volume("p1", "v", 2 * MiB).size_bytes == 2 * MiB


def test_no_spdk_tgt_is_a_clear_error(tmp_path):
    d = SpdkDriver(tmp_path / "state", rpc_socket=str(tmp_path / "nothing.sock"), timeout=2)
    with pytest.raises(SpdkRpcError, match="is it running"):
        d.create_pool("p1", [DeviceSpec("malloc:64M")])


def test_fake_runs_as_its_own_process_with_spdk_error_codes(tmp_path):
    from spdk.rpc.client import JSONRPCClient, JSONRPCException
    sock = str(tmp_path / "spdk.sock")
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.spdk_server", "--socket", sock],
                            cwd=str(Path(__file__).resolve().parents[1]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: os.path.exists(sock), 10, "the fake SPDK server's socket", interval=0.05)
        c = JSONRPCClient(sock, timeout=5)
        assert "FAKE" in c.call("spdk_get_version")["version"]
        assert c.call("bdev_malloc_create", {"num_blocks": 8192, "block_size": 512,
                                             "name": "m0"}) == "m0"
        with pytest.raises(JSONRPCException, match='"code": -17'):
            c.call("bdev_malloc_create", {"num_blocks": 8192, "block_size": 512, "name": "m0"})
        with pytest.raises(JSONRPCException, match="No such device"):
            c.call("bdev_get_bdevs", {"name": "nope"})
        with pytest.raises(JSONRPCException, match="Method not found"):
            c.call("no_such_method")
        c.close()
    finally:
        proc.terminate()
        proc.wait(5)
