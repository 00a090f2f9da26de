"""A TCG guest's own kernel (nvme-tcp) connects to a Strata spdk volume over NVMe/TCP and
writes; the host reads the same bytes through the volume with SPDK's spdk_dd. A clone of a
snapshot taken after the write is exported, and a second guest reads the snapshot's bytes
from it while the first volume has moved on. A host NQN outside the export's list is refused
in the guest too.

nvmf_tgt (a private one, as `strata up` runs it) listens on the host end of a veth into a
network namespace of the test's own, where the guests' taps are bridged. The guests' cloud
kernel has no NVMe in-band authentication (CONFIG_NVME_AUTH), so DH-HMAC-CHAP is checked with
spdk_dd (tests/test_spdk_nvmf.py), not here."""
import hashlib
import os

import pytest

from dataplane import DeviceSpec
from dataplane.spdk.driver import SpdkDriver
from dataplane.spdk.target import SpdkTarget, spdk_unavailable
from tests.guest import Boot
from tests.kit import free_port
from tests.spdk_support import attach_config, spdk_dd
from tests.vmhost import Netns

pytestmark = pytest.mark.root
MiB = 1 << 20
GUEST_NQN = "nqn.2014-08.org.nvmexpress:uuid:6e7f0000-0000-4000-8000-000000000001"
OTHER_NQN = "nqn.2014-08.org.nvmexpress:uuid:6e7f0000-0000-4000-8000-000000000002"
HOST_NQN = "nqn.2014-08.org.nvmexpress:uuid:6e7f0000-0000-4000-8000-0000000000ff"
SCRIPT = """set -e
load nvme
ip link set eth0 up
ip addr add {guest}/24 dev eth0
connect() {{
  echo "transport=tcp,traddr={host},trsvcid={port},nqn={nqn},hostnqn=$1" > /dev/nvme-fabrics
}}
if connect {other} 2>/dev/null; then echo OTHER admitted; else echo OTHER refused; fi
connect {hostnqn}
for i in $(seq 100); do [ -b /dev/nvme0n1 ] && break; sleep 0.2; done
echo SECTORS $(cat /sys/block/nvme0n1/size)
{body}
"""
WRITE = """dd if=/data.bin of=/dev/nvme0n1 bs=1M conv=fsync 2>/dev/null
echo WROTE $(sha256sum /data.bin | cut -d' ' -f1)
"""
READ = """echo READ $(dd if=/dev/nvme0n1 bs=1M count={mib} 2>/dev/null | sha256sum | cut -d' ' -f1)
"""


@pytest.fixture
def spdk(tmp_path):
    why = spdk_unavailable()
    if why:
        pytest.skip(why)
    target = SpdkTarget(tmp_path / "nvmf").start()
    drv = SpdkDriver(tmp_path / "state", rpc_socket=str(target.rpc_socket), timeout=60)
    try:
        yield drv
    finally:
        drv.rpc.close()
        target.stop()


def guest_run(guest_image, netns, tmp_path, tag, export, body, files=None, n=0) -> Boot:
    script = SCRIPT.format(guest=netns.guest_ip(n), host=export["traddr"],
                           port=export["trsvcid"], nqn=export["subsystem_nqn"],
                           hostnqn=GUEST_NQN, other=OTHER_NQN, body=body)
    initrd = guest_image.initrd_with(script, files, tag=tag)
    tap = netns.add_tap()
    argv = guest_image.boot_args(initrd) + [
        "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
        "-device", "virtio-net-pci,netdev=n0,romfile="]
    vm = Boot(argv, tmp_path / f"{tag}.log", timeout=300, netns=netns.name)
    with vm:
        vm.wait()
    return vm


def test_guest_kernel_writes_over_nvme_tcp_and_a_snapshot_clone_reads_in_a_second_guest(
        guest_image, spdk, tmp_path):
    data, later = os.urandom(4 * MiB), os.urandom(4 * MiB)
    with Netns() as netns:
        spdk.create_pool("fast", [DeviceSpec("image:128M")])
        spdk.create_volume("fast", "vm", 16 * MiB)
        port = free_port()
        exp = spdk.export_volume_nvmf("fast", "vm", hosts=[GUEST_NQN, HOST_NQN],
                                      traddr=netns.host_ip, trsvcid=port)
        vm = guest_run(guest_image, netns, tmp_path, "nvme-write", exp, WRITE,
                       {"/data.bin": data})
        assert vm.marker("OTHER") == "refused"
        assert vm.marker("SECTORS") == str(16 * MiB // 512)
        assert vm.marker("WROTE") == hashlib.sha256(data).hexdigest()

        # the host reads what the guest wrote, through the volume
        config = attach_config(exp["traddr"], exp["trsvcid"], exp["subsystem_nqn"], HOST_NQN)
        out = tmp_path / "back"
        done = spdk_dd(["--ib=remoten1", f"--of={out}", f"--bs={MiB}", "--count=4"], config,
                       tmp_path / "dd")
        assert done.returncode == 0, done.stdout[-800:]
        assert out.read_bytes() == data

        # a snapshot, then the volume moves on; its clone in a second guest has the old bytes
        spdk.create_snapshot("fast", "volume", "vm", "after-write")
        src = tmp_path / "later"
        src.write_bytes(later)
        done = spdk_dd([f"--if={src}", "--ob=remoten1", f"--bs={MiB}"], config, tmp_path / "dd")
        assert done.returncode == 0, done.stdout[-800:]
        spdk.clone_snapshot("fast", "volume", "vm", "after-write", "vm-clone")
        clone = spdk.export_volume_nvmf("fast", "vm-clone", hosts=[GUEST_NQN],
                                        traddr=netns.host_ip, trsvcid=free_port())
        vm2 = guest_run(guest_image, netns, tmp_path, "nvme-clone", clone, READ.format(mib=4),
                        n=1)
        assert vm2.marker("READ") == hashlib.sha256(data).hexdigest()
        vm3 = guest_run(guest_image, netns, tmp_path, "nvme-read", exp, READ.format(mib=4), n=2)
        assert vm3.marker("READ") == hashlib.sha256(later).hexdigest()
