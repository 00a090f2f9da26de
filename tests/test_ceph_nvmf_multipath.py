"""A volume of a Ceph pool served over NVMe-oF by two nvmf_tgt at once through SPDK's rbd
bdev, with ANA: one path optimized, the other non-optimized (as Ceph's NVMe-oF gateway does).

- SPDK's user-space initiator sees the same subsystem on both paths with their ANA states,
  and bytes written through one path read back through the other and through librbd; the
  optimized path moves; a target killed and started again gets its export back;
- DH-HMAC-CHAP keys and QoS limits apply on both paths: a wrong key is refused and the
  right one admitted on each, and each target's rbd bdev carries the limits;
- the block service's NVMe-oF transport exports a ceph volume to its host group;
- a TCG guest connects both paths with its kernel's native NVMe multipath and keeps
  writing when the optimized target is killed (kill -9); every byte it wrote reads back
  through librbd, by hash.

The two targets stand for two nodes: two nvmf_tgt processes, each with its own address on
the host end of a veth into the guests' namespace, in the host's network namespace. The module is in the ceph group (tests/parallel.py) and asks
for a guest image of its own (``own_guest_image``, conftest.py), not the guest group's.
"""
import hashlib
import os
import re
import subprocess

import pytest

from tests.ceph import driver_pool
from tests.kit import free_port
from tests.spdk_support import attach_config, key_file, spdk_dd

pytestmark = pytest.mark.root
MiB = 1 << 20
GUEST_NQN = "nqn.2014-08.org.nvmexpress:uuid:6e7f0000-0000-4000-8000-0000000000a1"
HOST_NQN = "nqn.2014-08.org.nvmexpress:uuid:6e7f0000-0000-4000-8000-0000000000a2"
ANA_STATE = {"1": "optimized", "2": "non_optimized", "3": "inaccessible"}

GUEST = """set -e
load nvme
ip link set eth0 up
ip addr add {guest}/24 dev eth0
for path in {paths}; do
  echo "transport=tcp,traddr=${{path%:*}},trsvcid=${{path#*:}},nqn={nqn},hostnqn={hostnqn}" \\
    > /dev/nvme-fabrics
done
# the second path's namespace is scanned after its connect returns: wait for both
for i in $(seq 150); do
  [ -b /dev/nvme0n1 ] && [ $(ls /sys/class/nvme/nvme*/nvme*c*n1/ana_state | wc -l) = 2 ] && break
  sleep 0.2
done
ana() {{
  for f in /sys/class/nvme/nvme*/nvme*c*n1/ana_state; do
    echo "$1 $(grep -o 'trsvcid=[0-9]*' ${{f%/*/*}}/address | cut -d= -f2) $(cat $f)"
  done
}}
ana ANA
echo MULTIPATH $(cat /sys/module/nvme_core/parameters/multipath)
echo IO_TIMEOUT $(cat /sys/module/nvme_core/parameters/io_timeout)
i=0
while [ $i -lt {chunks} ]; do
  dd if=/data.bin of=/dev/nvme0n1 bs=1M skip=$i seek=$i count=1 conv=fsync 2>/dev/null
  echo CHUNK $i $(cut -d' ' -f1 /proc/uptime)
  i=$((i + 1))
done
echo WROTE $(sha256sum /data.bin | cut -d' ' -f1)
ana AFTER
"""


@pytest.fixture
def two_paths(ceph_cluster, tmp_path):
    """(volume path, [(SpdkTarget, SpdkDriver, address), x2], Netns): two nvmf_tgt on two
    addresses of the host end of a guest namespace, and an RBD volume of a ceph pool."""
    from dataplane.spdk.driver import SpdkDriver
    from dataplane.spdk.target import SpdkTarget, spdk_unavailable
    from tests.vmhost import Netns

    why = spdk_unavailable()
    if why:
        pytest.skip(why)
    targets = []
    with driver_pool(ceph_cluster, "mp", "nvmfmp") as (ceph, pool), Netns() as netns:
        second = f"{netns.subnet}.3"
        subprocess.run(["ip", "addr", "add", f"{second}/24", "dev", netns.host_if], check=True)
        try:
            for i, address in enumerate((netns.host_ip, second)):
                target = SpdkTarget(tmp_path / f"nvmf{i}")
                targets.append((target, None, address))
                target.start()
                drv = SpdkDriver(tmp_path / f"state{i}", rpc_socket=str(target.rpc_socket),
                                 timeout=60)
                targets[-1] = (target, drv, address)
            volume = ceph.create_volume(pool, "vm", 16 * MiB)
            yield volume.path, targets, netns
        finally:
            for target, drv, _ in targets:
                if drv is not None:
                    drv.rpc.close()
                target.stop()


def export_both(targets, volume_path, hosts):
    from dataplane.spdk.rbd import export_multipath

    return export_multipath([(drv, address, free_port()) for _, drv, address in targets],
                            volume_path, hosts=hosts)


def identify(path: dict, nqn: str) -> str:
    """spdk_nvme_identify's report of the controller at one path."""
    from dataplane.spdk.target import run_app, spdk_binary

    trid = (f"trtype:TCP adrfam:IPv4 traddr:{path['traddr']} trsvcid:{path['trsvcid']} "
            f"subnqn:{nqn}")
    done = run_app([spdk_binary("spdk_nvme_identify"), "--no-huge", "-s", "256", "-p", "1",
                    "-r", trid], 120)
    assert done.returncode == 0, done.stdout[-1500:]
    return done.stdout


def read_image(volume_path: str, size: int) -> bytes:
    """The image's first ``size`` bytes, read through librbd."""
    import rados
    import rbd

    from dataplane.ceph.rbd import parse_rbd_path

    spec = parse_rbd_path(volume_path)
    with rados.Rados(conffile=spec["conf"], name=f"client.{spec['id']}") as cluster:
        with cluster.open_ioctx(spec["pool"]) as ioctx, rbd.Image(ioctx, spec["image"]) as img:
            return img.read(0, size)


def rbd_limits(drv) -> dict:
    """The QoS limits of the target's one rbd bdev, as bdev_get_bdevs reports them."""
    bdev = next(b for b in drv.rpc.call("bdev_get_bdevs") if b["name"].startswith("rbd:"))
    return bdev.get("assigned_rate_limits", {})


def test_user_space_initiator_sees_both_paths_with_their_ana_states(two_paths, tmp_path):
    from dataplane.errors import InvalidArgument

    volume_path, targets, _ = two_paths
    drv = targets[0][1]
    with pytest.raises(InvalidArgument, match="ana_state"):
        drv.export_rbd_nvmf(volume_path, traddr=targets[0][2], trsvcid=free_port(),
                            ana_state="fast")
    assert not [s for s in drv.rpc.call("nvmf_get_subsystems") if s["subtype"] == "NVMe"]
    # any host: spdk_nvme_identify v26.01 connects with a random host NQN (its -r hostnqn:
    # is parsed into a field it never uses)
    exp = export_both(targets, volume_path, hosts=None)
    nqn = exp["subsystem_nqn"]
    assert [p["ana_state"] for p in exp["paths"]] == ["optimized", "non_optimized"]

    reports = [identify(p, nqn) for p in exp["paths"]]
    for path, report in zip(exp["paths"], reports):
        states = re.findall(r"^\s*ANA State\s*:\s*(\d+)", report, re.M)
        assert [ANA_STATE[s] for s in states] == [path["ana_state"]], report[-1500:]
        assert re.search(r"Asymmetric Namespace Access Log Page:\s+Supported", report)
    serials = {re.search(r"^Serial Number:\s*(\S+)", r, re.M).group(1) for r in reports}
    assert len(serials) == 1           # one subsystem, two paths

    # written through the non-optimized path, read through the optimized one and librbd
    data = os.urandom(4 * MiB)
    src, back = tmp_path / "src", tmp_path / "back"
    src.write_bytes(data)
    a, b = exp["paths"]
    done = spdk_dd([f"--if={src}", "--ob=remoten1", f"--bs={MiB}"],
                   attach_config(b["traddr"], b["trsvcid"], nqn, HOST_NQN), tmp_path / "dd")
    assert done.returncode == 0, done.stdout[-800:]
    done = spdk_dd(["--ib=remoten1", f"--of={back}", f"--bs={MiB}", "--count=4"],
                   attach_config(a["traddr"], a["trsvcid"], nqn, HOST_NQN), tmp_path / "dd")
    assert done.returncode == 0, done.stdout[-800:]
    assert back.read_bytes() == data
    assert read_image(volume_path, len(data)) == data

    # the optimized path moves: the targets' listeners swap states
    targets[0][1].set_nvmf_ana_state(nqn, "non_optimized")
    targets[1][1].set_nvmf_ana_state(nqn, "optimized")
    states = [re.findall(r"^\s*ANA State\s*:\s*(\d+)", identify(p, nqn), re.M)
              for p in exp["paths"]]
    assert states == [["2"], ["1"]]

    # a target killed and started again gets its image, subsystem and ANA state back
    target, drv_b, _ = targets[1]
    target.kill()
    target.start()
    drv_b.rpc.close()
    drv_b.reconcile_nvmf()
    assert re.findall(r"^\s*ANA State\s*:\s*(\d+)", identify(b, nqn), re.M) == ["1"]
    done = spdk_dd(["--ib=remoten1", f"--of={back}", f"--bs={MiB}", "--count=4"],
                   attach_config(b["traddr"], b["trsvcid"], nqn, HOST_NQN), tmp_path / "dd")
    assert done.returncode == 0, done.stdout[-800:]
    assert back.read_bytes() == data


def test_dh_hmac_chap_and_qos_on_both_paths(two_paths, tmp_path):
    from dataplane.spdk.dhchap import generate_dhchap_key
    from dataplane.spdk.rbd import export_multipath

    volume_path, targets, _ = two_paths
    secret = generate_dhchap_key()
    right = key_file(tmp_path / "right", secret)
    wrong = key_file(tmp_path / "wrong", generate_dhchap_key())
    qos = {"rw_ios_per_sec": 2000, "w_mbytes_per_sec": 10}
    exp = export_multipath([(drv, address, free_port()) for _, drv, address in targets],
                           volume_path, hosts=[HOST_NQN], host_keys={HOST_NQN: secret},
                           qos=qos)
    nqn = exp["subsystem_nqn"]
    data = os.urandom(MiB)
    src = tmp_path / "src"
    src.write_bytes(data)
    for (_, drv, _), path in zip(targets, exp["paths"]):
        args = path["traddr"], path["trsvcid"], nqn, HOST_NQN
        refused = spdk_dd(["--ib=remoten1", f"--of={tmp_path / 'x'}", f"--bs={MiB}",
                           "--count=1"], attach_config(*args, dhchap_key_file=wrong),
                          tmp_path / "dd")
        assert refused.returncode != 0, path
        done = spdk_dd([f"--if={src}", "--ob=remoten1", f"--bs={MiB}"],
                       attach_config(*args, dhchap_key_file=right), tmp_path / "dd")
        assert done.returncode == 0, done.stdout[-800:]
        assert read_image(volume_path, MiB) == data
        limits = rbd_limits(drv)
        assert (limits["rw_ios_per_sec"], limits["w_mbytes_per_sec"]) == (2000, 10)
        assert secret not in drv._nvmf_path().read_text()    # the key is in the keyring file
        data = os.urandom(MiB)
        src.write_bytes(data)
    # the limits change live on a path, and go
    targets[1][1].set_rbd_nvmf_qos(nqn, None)
    assert not any(rbd_limits(targets[1][1]).values())
    for _, drv, _ in targets:
        drv.unexport_rbd_nvmf(nqn)
        assert not list((drv.state_dir / "nvmf-keys").glob("*"))


def test_guest_keeps_writing_when_the_optimized_target_is_killed(two_paths, own_guest_image,
                                                                   tmp_path):
    from tests.guest import Boot

    volume_path, targets, netns = two_paths
    exp = export_both(targets, volume_path, hosts=[GUEST_NQN])
    a, b = exp["paths"]
    chunks = 12
    data = os.urandom(chunks * MiB)
    script = GUEST.format(guest=netns.guest_ip(0), nqn=exp["subsystem_nqn"],
                          hostnqn=GUEST_NQN, chunks=chunks,
                          paths=" ".join(f"{p['traddr']}:{p['trsvcid']}" for p in (a, b)))
    initrd = own_guest_image.initrd_with(script, {"/data.bin": data}, tag="multipath")
    tap = netns.add_tap()
    # the surviving target takes the image's exclusive lock only once the dead client's watch
    # expires (~30 s, the OSDs' osd_client_watch_timeout): a write waits that long, as long
    # as the kernel's default NVMe I/O timeout (30 s), which would reset the surviving path
    argv = own_guest_image.boot_args(initrd, append="nvme_core.io_timeout=120") + [
        "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
        "-device", "virtio-net-pci,netdev=n0,romfile="]
    with Boot(argv, tmp_path / "guest.log", timeout=400, netns=netns.name) as vm:
        vm.wait_for("CHUNK 2 ")
        targets[0][0].kill()                       # the optimized path's node dies
        vm.wait()
    out = vm.output()
    times = [float(t) for t in re.findall(r"^CHUNK \d+ ([\d.]+)\r?$", out, re.M)]
    assert len(times) == chunks, out[-3000:]
    stall = max(later - earlier for earlier, later in zip(times, times[1:]))
    assert vm.marker("MULTIPATH") == "Y" and vm.marker("IO_TIMEOUT") == "120"
    ana = dict(re.findall(r"^ANA (\d+) (\S+)\r?$", out, re.M))
    assert ana == {a["trsvcid"]: "optimized", b["trsvcid"]: "non-optimized"}, out[-3000:]
    assert vm.marker("WROTE") == hashlib.sha256(data).hexdigest()
    # every acknowledged byte is in the image, read by librbd
    image = read_image(volume_path, len(data))
    differ = [i for i in range(chunks) if image[i * MiB:(i + 1) * MiB] != data[i * MiB:(i + 1) * MiB]]
    assert not differ, f"MiB chunks not in the image: {differ}; guest: {out[-3000:]}"
    print(f"longest wait for a 1 MiB write (the failover): {stall:.1f} s")


def test_block_runtime_exports_a_ceph_volume_over_nvmf_to_its_host_group(two_paths, tmp_path):
    """The block service's NVMe-oF transport given a ceph volume's rbd: path (what the plane
    passes for a volume of a Ceph pool): one node's optimized path, the group's hosts only."""
    from services.block.transports import Host, HostGroup, QosLimits
    from services.block.transports.nvmf import NvmfTarget

    volume_path, targets, _ = two_paths
    _, drv, address = targets[0]
    nvmf = NvmfTarget(drv, tmp_path / "block", host=address, port=free_port())
    other = "nqn.2014-08.org.nvmexpress:uuid:6e7f0000-0000-4000-8000-0000000000a3"
    info = nvmf.export("exp-1", volume_path,
                       host_group=HostGroup("g", hosts=[Host("h", nqn=HOST_NQN)]),
                       qos=QosLimits(iops_total=1500))
    assert rbd_limits(drv)["rw_ios_per_sec"] == 2000          # SPDK's steps of 1000
    nvmf.set_qos("exp-1", None)
    assert rbd_limits(drv)["rw_ios_per_sec"] == 0
    assert info["traddr"] == address and info["subsystem_nqn"].endswith(".vm")
    assert nvmf.volume_of("exp-1") == volume_path

    data = os.urandom(2 * MiB)
    src = tmp_path / "src"
    src.write_bytes(data)
    args = info["traddr"], info["trsvcid"], info["subsystem_nqn"]
    done = spdk_dd([f"--if={src}", "--ob=remoten1", f"--bs={MiB}"],
                   attach_config(*args, HOST_NQN), tmp_path / "dd")
    assert done.returncode == 0, done.stdout[-800:]
    assert read_image(volume_path, len(data)) == data
    refused = spdk_dd(["--ib=remoten1", f"--of={tmp_path / 'x'}", f"--bs={MiB}", "--count=1"],
                      attach_config(*args, other), tmp_path / "dd")
    assert refused.returncode != 0

    nvmf.set_hosts("exp-1", HostGroup("g", hosts=[Host("o", nqn=other)]))
    moved = spdk_dd(["--ib=remoten1", f"--of={tmp_path / 'y'}", f"--bs={MiB}", "--count=2"],
                    attach_config(*args, other), tmp_path / "dd")
    assert moved.returncode == 0 and (tmp_path / "y").read_bytes() == data

    nvmf.unexport("exp-1")
    assert not [s for s in drv.rpc.call("nvmf_get_subsystems") if s["subtype"] == "NVMe"]
    assert not [b for b in drv.rpc.call("bdev_get_bdevs") if b["name"].startswith("rbd:")]
