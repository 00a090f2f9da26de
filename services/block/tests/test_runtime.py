"""BlockRuntime: the plane's entry point, with real tgtd, qemu-storage-daemon, a real
dataplane volume, and the spdk driver on a real nvmf_tgt for NVMe-oF."""

import os
import subprocess
import sys

import pytest

from dataplane import DeviceSpec, DirectoryDriver
from services.block.tests.conftest import need
from services.block.transports import (
    BlockRuntime,
    ExportExists,
    ExportInUse,
    ExportNotFound,
    Host,
    HostGroup,
    InvalidExport,
    QosLimits,
)
from plumbing.process import wait_for_port
from tests.kit import free_port

MiB = 1 << 20
IQN = "iqn.2026-01.io.strata.test:rt"
NQN = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


@pytest.fixture
def runtime(workdir):
    need("tgtd", "qemu-storage-daemon", "nbdinfo", "iscsi-readcapacity16")
    from dataplane.spdk.driver import SpdkDriver
    from dataplane.spdk.target import SpdkTarget, spdk_unavailable
    if spdk_unavailable():
        pytest.skip(spdk_unavailable())
    target = SpdkTarget(os.path.join(workdir, "spdk")).start()
    spdk = SpdkDriver(os.path.join(workdir, "spdk-state"), rpc_socket=str(target.rpc_socket),
                      timeout=30)
    rt = BlockRuntime(os.path.join(workdir, "block"), iscsi_port=free_port(),
                      nbd_port=free_port(), nvmf_port=free_port(), spdk_driver=spdk)
    rt.start()
    try:
        yield rt, spdk
    finally:
        rt.stop()
        spdk.rpc.close()
        target.stop()


def test_one_volume_three_ways_resize_and_delete_guard(runtime, workdir):
    rt, spdk = runtime
    drv = DirectoryDriver(os.path.join(workdir, "dp"))
    drv.create_pool("p1", [DeviceSpec("image:256M")])
    vol = drv.create_volume("p1", "vm", 32 * MiB)
    group = HostGroup("rt", hosts=[Host("h1", iqn=IQN, nqn=NQN)])

    iscsi = rt.export("exp-1", "iscsi", vol.path, host_group=group)
    nbd = rt.export("exp-2", "nbd", vol.path, read_only=True, qos=QosLimits(iops_total=2000))
    assert iscsi["target_iqn"].endswith(":rt") and nbd["name"] == "exp-2"
    assert rt.exports_of(vol.path) == ["exp-1", "exp-2"]
    with pytest.raises(ExportInUse, match="exp-1, exp-2"):
        rt.check_volume_deletable(vol.path)
    with pytest.raises(ExportExists):
        rt.export("exp-1", "nbd", vol.path)
    with pytest.raises(InvalidExport):
        rt.set_qos("exp-1", QosLimits(bps_read=MiB))

    drv.resize_volume("p1", "vm", 80 * MiB)
    assert rt.volume_resized(vol.path) == {"exp-1": 80 * MiB, "exp-2": 80 * MiB}
    cap = subprocess.run(["iscsi-readcapacity16", "-i", IQN,
                          f"iscsi://{iscsi['portal']}/{iscsi['target_iqn']}/{iscsi['lun']}"],
                         capture_output=True, text=True)
    assert "Total size:83886080" in cap.stdout, cap.stderr
    size = subprocess.run(["nbdinfo", "--size", nbd["uri"]], capture_output=True, text=True)
    assert int(size.stdout) == 80 * MiB

    # NVMe-oF for a volume of the spdk driver
    spdk.create_pool("fast", [DeviceSpec("image:128M")])
    fast = spdk.create_volume("fast", "db", 16 * MiB)
    nv = rt.export("exp-3", "nvmf", fast.path, host_group=group,
                   qos=QosLimits(bps_write=50_000_000))
    assert nv["subsystem_nqn"] == "nqn.2026-01.io.strata:fast.db" and nv["trtype"] == "tcp"
    assert spdk.volume_qos("fast", "db")["w_mbytes_per_sec"] == 50
    with pytest.raises(ExportInUse):
        rt.check_volume_deletable(fast.path)
    spdk.resize_volume("fast", "db", 32 * MiB)
    assert rt.volume_resized(fast.path) == {"exp-3": 32 * MiB}

    health = rt.health()
    assert all(h["running"] for h in health.values()), health
    for e in ("exp-1", "exp-2", "exp-3"):
        rt.unexport(e)
    rt.check_volume_deletable(vol.path)
    drv.delete_volume("p1", "vm")
    spdk.delete_volume("fast", "db")
    with pytest.raises(ExportNotFound):
        rt.unexport("exp-1")
    drv.destroy_pool("p1")
    spdk.destroy_pool("fast")


def test_sessions_from_several_processes_take_turns(workdir):
    """API workers and Celery tasks each open a short session; the daemons outlive them."""
    need("tgtd", "qemu-storage-daemon", "nbdinfo", "iscsi-inq")
    state = os.path.join(workdir, "block")
    kwargs = {"iscsi_port": free_port(), "nbd_port": free_port()}
    a = os.path.join(workdir, "a.raw")
    b = os.path.join(workdir, "b.raw")
    for path in (a, b):
        with open(path, "wb") as f:
            f.truncate(8 * MiB)
    with BlockRuntime.session(state, **kwargs) as rt:
        nbd = rt.export("exp-a", "nbd", a)
    other = subprocess.run([sys.executable, "-c", (
        "import json, sys\n"
        "from services.block.transports import BlockRuntime\n"
        f"with BlockRuntime.session({state!r}, **{kwargs!r}) as rt:\n"
        f"    print(json.dumps(rt.export('exp-b', 'iscsi', {b!r})))\n")],
        capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr
    with BlockRuntime.session(state, **kwargs) as rt:
        try:
            assert sorted(e for t in ("iscsi", "nbd") for e in rt.transports[t].list_exports()) \
                == ["exp-a", "exp-b"]
            size = subprocess.run(["nbdinfo", "--size", nbd["uri"]], capture_output=True,
                                  text=True)
            assert int(size.stdout) == 8 * MiB
            info = rt.connection_info("exp-b")
            inq = subprocess.run(["iscsi-inq", f"iscsi://{info['portal']}/"
                                  f"{info['target_iqn']}/{info['lun']}"],
                                 capture_output=True, text=True)
            assert inq.returncode == 0, inq.stderr
        finally:
            rt.stop()
    after = BlockRuntime(state, **kwargs)
    assert not after.iscsi._answers()                          # tgtd is gone
    assert not wait_for_port("127.0.0.1", kwargs["nbd_port"], 0.2)   # and so is qsd
