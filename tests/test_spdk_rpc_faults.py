"""The spdk driver against the FAKE target (tests/fakes/spdk_server.py), for the faults a
real nvmf_tgt cannot be made to produce on demand; each test names its fault. Everything
else about the driver runs on a real nvmf_tgt (test_spdk_driver.py, test_spdk_nvmf.py).
"""

import pytest

from dataplane import DeviceSpec
from dataplane.errors import InUse, InvalidArgument, NotFound
from dataplane.spdk.driver import SpdkDriver
from dataplane.spdk.rpc import SpdkRpcError
from tests.fakes.spdk_server import FakeSpdkServer

MiB = 1 << 20


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


def test_error_codes_become_specific_errors(drv, fake):
    """Fault: chosen errno replies (ENOSPC, EBUSY, an internal error) to bdev_lvol_create; a
    real target gives them only in states hard to reach on purpose (a full blobstore's
    metadata, a bdev claimed mid-call)."""
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
    assert drv.create_volume("p1", "v", MiB).name == "v"    # and then it works


@pytest.mark.parametrize("fault, message", [
    ({"result": "x"}, "no 'result'"),
    ({"wrong_id": True}, "answered request"),
    ({"raw": b'{"jsonrpc": "2.0", "id": 7, "res'}, "no valid reply"),
    ({"hang_up": True}, "no valid reply"),
])
def test_malformed_replies_become_clear_errors(drv, fake, fault, message):
    """Fault: a reply that is not valid JSON-RPC (SPDK never sends one)."""
    drv.create_pool("p1", [DeviceSpec("malloc:64M")])
    drv.create_volume("p1", "v", MiB)
    fake.inject("bdev_lvol_resize", **fault)
    with pytest.raises(SpdkRpcError, match=message) as err:
        drv.resize_volume("p1", "v", 2 * MiB)
    assert err.value.code == "command_failed" and "bdev_lvol_resize" in str(err.value)
    # the driver reconnects and carries on
    assert drv.resize_volume("p1", "v", 2 * MiB).size_bytes == 2 * MiB


def test_pool_on_a_pcie_nvme_device(drv, fake):
    """Fault: none; the machine has no PCIe NVMe device (and nvmf_tgt runs with -u, no PCI),
    so attaching one by its PCI address is checked against the fake."""
    n = drv.create_pool("n", [DeviceSpec("nvme:0000:01:00.0")])
    assert n.devices[0].size_bytes == 1 << 30
    with pytest.raises(NotFound):
        drv.create_pool("x", [DeviceSpec("nvme:0000:09:00.0")])
    assert "x" not in drv.list_pools()
