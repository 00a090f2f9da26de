"""The node plugin for real, in a TCG guest (services/csi/tests/guest_node.py): a whole Debian
system with the kernel's NFS, iSCSI and NVMe/TCP clients, reached over its network by the
tests' gRPC calls, while the controller runs on the host against a live `strata up` whose data
services listen on the host end of the guest's network (``--data-host``).

In the guest: an NFS file system, an iSCSI volume (a file system made on it, then grown) and an
NVMe-oF volume (raw block) are staged and published; bytes are written through the published
path; unpublish and unstage leave nothing mounted or logged in; the host then reads the same
bytes back through Strata (the file system's directory; the volume over iSCSI with libiscsi,
or over NVMe/TCP with SPDK's spdk_dd). Also: unstage after a restart of the plugin, and a stage
of a volume whose export was deleted (a clear error, nothing left mounted).

One guest per module (booting under TCG costs tens of seconds). The NVMe-oF test uses the
appliance's own nvmf_tgt (`strata up --spdk on`), not the spdk group's session target, so this
module belongs to the guest group alone (tests/parallel.py); without an SPDK build the
appliance runs without it and that test skips."""
import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest

from services.csi.proto import csi_pb2
from services.csi.tests.guest_node import Forwarder, GuestNode, Staged, block_cap, mount_cap, rest
from services.csi.tests.plugin import ROOT, Plugin, local_node
from services.csi.tests.test_sanity import SKIPPED, build_csi_sanity, run_sanity
from tests.appliance import Appliance
from tests.kit import free_port
from tests.spdk_support import attach_config, spdk_dd, spdk_unavailable
from tests.vmhost import Netns

pytestmark = pytest.mark.root

Mode = csi_pb2.VolumeCapability.AccessMode.Mode
MiB = 1 << 20


@pytest.fixture(scope="module")
def netns():
    with Netns() as ns:
        yield ns


@pytest.fixture(scope="module")
def app(netns):
    spdk = spdk_unavailable() is None
    extra = ["--data-host", netns.host_ip]
    if spdk:
        extra += ["--spdk", "on", "--nvmf-port", str(free_port())]
    appliance = Appliance(pool_size="1G", extra_args=tuple(extra))
    appliance.spdk = spdk
    try:
        yield appliance.start(timeout=300)
    finally:
        appliance.destroy()


@pytest.fixture(scope="module")
def workdir():
    return Path(tempfile.mkdtemp(prefix="strata-test-csi-vm-"))


@pytest.fixture(scope="module")
def controller_plugin(app, workdir):
    creds = app.credentials
    (workdir / "ctl").mkdir()
    plug = Plugin(workdir / "ctl", creds["api_url"], creds["token"], mode="controller").start()
    yield plug
    plug.stop()


@pytest.fixture(scope="module")
def controller(controller_plugin):
    with controller_plugin.channel() as ch:
        yield controller_plugin.controller(ch)


@pytest.fixture(scope="module")
def guest(guest_image, netns, app, workdir):
    """The guest's plugin serves the controller too (for csi-sanity, which asks one endpoint's
    Identity whether a controller is there): it reaches the plane through a forwarder on the
    host end of the guest's network. The other tests call only its Node service."""
    forward = Forwarder((netns.host_ip, 0), ("127.0.0.1", app.port))
    # named as the appliance's node: csi-sanity asks for volumes in the node's topology
    node = GuestNode(guest_image, netns, workdir,
                     name=local_node(app.credentials["api_url"], app.credentials["token"]),
                     plane_url=f"http://{netns.host_ip}:{forward.port}",
                     token=app.credentials["token"])
    try:
        yield node.start()
    finally:
        node.stop()
        forward.close()


@pytest.fixture(scope="module")
def node(guest):
    with guest.channel() as ch:
        yield guest.node(ch)


@pytest.fixture(scope="module")
def node_id(node):
    return node.NodeGetInfo(csi_pb2.NodeGetInfoRequest(), timeout=30).node_id


def guest_mounts(guest) -> str:
    return guest.sh("cat /proc/self/mountinfo").decode()


def assert_left_nothing(guest, staged):
    table = guest_mounts(guest)
    assert f" {staged.staging}" not in table and f" {staged.target}" not in table, table
    sessions = guest.run(["iscsiadm", "-m", "session"])
    assert sessions[0] != 0 or not sessions[1].strip(), sessions
    assert not guest.sh("ls /sys/class/nvme/ 2>/dev/null || true").strip()


def test_nfs_file_system_written_in_the_guest_is_read_back_on_the_host(
        app, controller, guest, node, node_id):
    blob = os.urandom(2 * MiB + 123)
    vol = Staged(controller, node, node_id, "pvc-nfs-1", mount_cap(Mode.MULTI_NODE_MULTI_WRITER),
                 {"protocol": "nfs"})
    try:
        ctx = vol.controller_publish()
        assert ctx["server"] == app_netns_host(app) and ctx["export"]
        vol.stage(guest)
        vol.publish()
        guest.sh(f"cat > {vol.target}/shard.bin && sync", stdin=blob)
        stats = node.NodeGetVolumeStats(csi_pb2.NodeGetVolumeStatsRequest(
            volume_id=vol.vol.volume_id, volume_path=vol.target), timeout=60)
        assert stats.usage[0].total > 0
        assert "nfs4" in guest.sh(f"grep ' {vol.staging} ' /proc/mounts").decode()
    finally:
        vol.unpublish_and_unstage()
        vol.unpublish_and_unstage()  # idempotent
    assert_left_nothing(guest, vol)
    fs = rest(app, "GET", f"filesystems/{vol.vol.volume_context['name']}/")
    assert Path(fs["path"], "shard.bin").read_bytes() == blob
    vol.delete()
    assert not [e for e in rest(app, "GET", "nfs-exports/?limit=1000")["results"]
                if e["filesystem"] == vol.vol.volume_context["name"]]


def app_netns_host(app) -> str:
    return app.extra_args[app.extra_args.index("--data-host") + 1]


def read_iscsi_volume(ctx: dict, initiator: str, out: Path) -> bytes:
    host, _, port = ctx["portal"].rpartition(":")
    subprocess.run(["qemu-img", "convert", "-O", "raw", "--image-opts",
                    f"driver=iscsi,transport=tcp,portal={host}:{port},target={ctx['target_iqn']},"
                    f"lun={ctx['lun']},initiator-name={initiator}", str(out)],
                   check=True, capture_output=True, timeout=300)
    return out.read_bytes()


def test_iscsi_volume_gets_a_file_system_grows_and_is_read_back_through_strata(
        app, controller, guest, node, node_id, workdir):
    blob = os.urandom(3 * MiB)
    vol = Staged(controller, node, node_id, "pvc-iscsi-1", mount_cap(), {"protocol": "iscsi"},
                 size=64 * MiB)
    try:
        ctx = vol.controller_publish()
        vol.stage(guest)
        vol.publish()
        guest.sh(f"cat > {vol.target}/shard.bin && sync", stdin=blob)
        assert "ext4" in guest.sh(f"grep ' {vol.staging} ' /proc/mounts").decode()
        before = node.NodeGetVolumeStats(csi_pb2.NodeGetVolumeStatsRequest(
            volume_id=vol.vol.volume_id, volume_path=vol.target), timeout=60).usage[0].total

        grown = controller.ControllerExpandVolume(csi_pb2.ControllerExpandVolumeRequest(
            volume_id=vol.vol.volume_id,
            capacity_range=csi_pb2.CapacityRange(required_bytes=128 * MiB)), timeout=120)
        assert grown.capacity_bytes == 128 * MiB and grown.node_expansion_required
        done = node.NodeExpandVolume(csi_pb2.NodeExpandVolumeRequest(
            volume_id=vol.vol.volume_id, volume_path=vol.target,
            staging_target_path=vol.staging), timeout=300)
        assert done.capacity_bytes == 128 * MiB
        after = node.NodeGetVolumeStats(csi_pb2.NodeGetVolumeStatsRequest(
            volume_id=vol.vol.volume_id, volume_path=vol.target), timeout=60).usage[0].total
        assert after > before * 1.8, (before, after)
    finally:
        vol.unpublish_and_unstage()
    assert_left_nothing(guest, vol)
    # staged again (after the guest let go): the file system is found, not made anew
    vol.stage(guest)
    vol.publish()
    assert hashlib.sha256(guest.sh(f"cat {vol.target}/shard.bin")).digest() == \
        hashlib.sha256(blob).digest()
    vol.unpublish_and_unstage()
    assert_left_nothing(guest, vol)

    image = read_iscsi_volume(ctx, guest.iqn, workdir / "iscsi-volume.img")
    assert len(image) == 128 * MiB
    got = subprocess.run(["debugfs", "-R", "cat /shard.bin", str(workdir / "iscsi-volume.img")],
                         capture_output=True, check=True, timeout=120).stdout
    assert got == blob
    vol.delete()


def test_nvmeof_raw_block_volume_written_in_the_guest_is_read_back_through_strata(
        app, controller, guest, node, node_id, workdir):
    if not app.spdk:
        pytest.skip(spdk_unavailable())
    with contextlib.suppress(AssertionError):
        rest(app, "POST", "pools/", {"name": "fast", "driver": "spdk",
                                     "devices": ["image:256M"]})
    blob = os.urandom(4 * MiB)
    # the StorageClass's QoS parameters become the export's limits
    vol = Staged(controller, node, node_id, "pvc-nvme-1", block_cap(),
                 {"protocol": "nvmeof", "pool": "fast", "qos_iops_total": "20000",
                  "qos_bps_total": "200000000"}, size=16 * MiB)
    try:
        ctx = vol.controller_publish()
        name = vol.vol.volume_id.split("/")[1]
        export = [e for e in rest(app, "GET", "block-exports/?limit=1000")["results"]
                  if e["volume"] == name][0]
        assert (export["protocol"], export["iops_total"], export["bps_total"],
                export["state"]) == ("nvmf", 20000, 200_000_000, "online"), export
        vol.stage(guest)
        vol.publish()
        assert guest.sh(f"test -b {vol.target} && blockdev --getsize64 {vol.target}") \
            .strip() == str(16 * MiB).encode()
        guest.sh(f"dd of={vol.target} bs=1M oflag=direct 2>/dev/null", stdin=blob)
        stats = node.NodeGetVolumeStats(csi_pb2.NodeGetVolumeStatsRequest(
            volume_id=vol.vol.volume_id, volume_path=vol.target), timeout=60)
        assert stats.usage[0].total == 16 * MiB
    finally:
        vol.unpublish_and_unstage()
    assert_left_nothing(guest, vol)
    config = attach_config(ctx["traddr"], ctx["trsvcid"], ctx["subsystem_nqn"], guest.nqn)
    out = workdir / "nvme-back"
    done = spdk_dd(["--ib=remoten1", f"--of={out}", f"--bs={MiB}", "--count=4"], config,
                   workdir / "dd")
    assert done.returncode == 0, done.stdout[-800:]
    assert out.read_bytes() == blob
    vol.delete()


def test_unstage_after_the_plugin_restarted_in_the_guest(app, controller, guest, node,
                                                          node_id):
    vol = Staged(controller, node, node_id, "pvc-restart", block_cap(), {"protocol": "iscsi"},
                 size=16 * MiB)
    vol.controller_publish()
    vol.stage(guest)
    vol.publish()
    pid = guest.sh("cat /run/csi.pid").strip().decode()
    guest.sh(f"kill {pid}; while kill -0 {pid} 2>/dev/null; do sleep 0.1; done")
    guest.wait_serving(120)
    assert guest.sh("cat /run/csi.pid").strip().decode() != pid
    with guest.channel() as ch:  # a new connection to the new plugin
        vol.node = guest.node(ch)
        vol.unpublish_and_unstage()
        vol.unpublish_and_unstage()  # idempotent
    assert_left_nothing(guest, vol)
    vol.delete()


def test_stage_of_a_volume_whose_export_was_deleted_fails_clearly_leaving_nothing(
        app, controller, guest, node, node_id):
    nfs = Staged(controller, node, node_id, "pvc-gone-nfs",
                 mount_cap(Mode.MULTI_NODE_MULTI_WRITER), {"protocol": "nfs"})
    nfs.controller_publish()
    for exp in rest(app, "GET", "nfs-exports/?limit=1000")["results"]:
        if exp["filesystem"] == nfs.vol.volume_context["name"]:
            rest(app, "DELETE", f"nfs-exports/{exp['id']}/")
    block = Staged(controller, node, node_id, "pvc-gone-iscsi", mount_cap(),
                   {"protocol": "iscsi"}, size=16 * MiB)
    block.controller_publish()
    for exp in rest(app, "GET", "block-exports/?limit=1000")["results"]:
        if exp["volume"] == block.vol.volume_context["name"]:
            rest(app, "DELETE", f"block-exports/{exp['id']}/")
    for vol in (nfs, block):
        with pytest.raises(grpc.RpcError) as err:
            vol.stage(guest)
        print(err.value.details())
        assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()
        assert vol.vol.volume_id in err.value.details()
        assert_left_nothing(guest, vol)
        vol.unpublish_and_unstage()  # what a CO does next: nothing to do, no error
        vol.delete()


PATH_COMMANDS = (("createmountpathcmd", "mkdir"), ("createstagingpathcmd", "mkdir"),
                 ("removemountpathcmd", "rm"), ("removestagingpathcmd", "rm"),
                 ("checkpathcmd", "check"))


def test_csi_sanity_with_the_node_plugin_in_the_guest(app, controller_plugin, guest,
                                                      workdir):
    """csi-sanity against the plugin in the guest over TCP (controller and node: csi-sanity
    takes a node's Identity to say whether there is a controller), volumes of the nfs
    protocol, staged with the guest kernel's NFS client. Its staging and target paths are made
    and checked in the guest (path commands through the test agent)."""
    work = workdir / "sanity"
    work.mkdir()
    agent = f"{guest.address}:{guest.port + 1}"
    extra = []
    for flag, action in PATH_COMMANDS:
        script = work / f"{flag}.sh"
        script.write_text(f"#!/bin/sh\ncd {ROOT} && exec {sys.executable} -m "
                          f'services.csi.tests.guest_path {action} {agent} "$1"\n')
        script.chmod(0o755)
        extra.append(f"--csi.{flag}={script}")
    passed, skipped, failed, run = run_sanity(
        build_csi_sanity(), work, app.credentials["token"], guest.endpoint,
        "protocol: nfs\npool: default\n", tuple(extra))
    assert not failed, "\n\n".join(f"{n}\n{m}" for n, m in failed)
    assert run.returncode == 0, run.stdout[-4000:]
    assert set(skipped) <= set(SKIPPED), sorted(set(skipped) - set(SKIPPED))
    assert len(passed) > 60
    assert " /tmp/" not in guest_mounts(guest)
