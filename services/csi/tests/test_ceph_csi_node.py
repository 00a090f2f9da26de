"""CephFS volumes through the CSI driver, staged by the kernel Ceph client of the node plugin's
TCG guest (services/csi/tests/guest_node.py) with a cephx key scoped to the file system.

A ceph pool of the session's Ceph cluster (which listens on 10.78.0.1; the guest gets there by
its default route, the host end of its network) is added to a live `strata up`; the controller
runs on the host. A CephFS volume is published (a scoped key made for the node), staged and
published in the guest, written, unpublished and unstaged; the host reads the bytes back
through Strata, and ControllerUnpublish revokes the key. The key of one volume, used to mount
another, is refused (PERMISSION_DENIED) and nothing is left mounted. A read-only publish gets a
read-only key and mount; cephfs on a pool that is not a ceph pool, or a stage without the
published key, is INVALID_ARGUMENT.

The module belongs to the ceph group (tests/parallel.py), so it asks for a guest image of
its own (``own_guest_image``, conftest.py), not the guest group's ``guest_image``; the
guest's disk is the machine's cached one (guest_node.disk_image)."""
import os
import uuid
from pathlib import Path

import grpc
import pytest

from services.csi.proto import csi_pb2
from services.csi.tests.guest_node import GuestNode, Staged, mount_cap, rest
from services.csi.tests.test_vm_node import (  # noqa: F401  (module fixtures, reused)
    assert_left_nothing, controller, controller_plugin, netns, node, node_id, workdir)
from tests.appliance import Appliance
from tests.ceph import ceph_pool_body

pytestmark = pytest.mark.root

Mode = csi_pb2.VolumeCapability.AccessMode.Mode
MiB = 1 << 20
SHARED = mount_cap(Mode.MULTI_NODE_MULTI_WRITER)


@pytest.fixture(scope="module")
def app(netns):
    appliance = Appliance(pool_size="1G", extra_args=("--data-host", netns.host_ip))
    try:
        yield appliance.start(timeout=300)
    finally:
        appliance.destroy()


@pytest.fixture(scope="module")
def guest(own_guest_image, netns, workdir):
    node = GuestNode(own_guest_image, netns, workdir, name="ceph-node")
    try:
        yield node.start()
    finally:
        node.stop()


@pytest.fixture(scope="module")
def ceph_pool(app, ceph_cluster):
    """A ceph pool of the session's cluster in the appliance; deleted after."""
    name = f"csi{uuid.uuid4().hex[:6]}"
    rest(app, "POST", "pools/", ceph_pool_body(ceph_cluster, name, redundancy="replicated:3",
                                               failure_domain="host"))
    yield name
    rest(app, "DELETE", f"pools/{name}/")


def ceph_keys(app, vol) -> list[str]:
    return [k["name"] for k in
            rest(app, "GET", f"filesystems/{vol.vol.volume_context['name']}/ceph-keys/")]


def test_cephfs_volume_staged_with_a_scoped_key_in_the_guest_is_read_back_on_the_host(
        app, ceph_pool, controller, guest, node, node_id):
    blob = os.urandom(2 * MiB + 321)
    vol = Staged(controller, node, node_id, "pvc-cephfs-1", SHARED,
                 {"protocol": "cephfs", "pool": ceph_pool})
    assert not {"key", "secret", "userKey"} & set(vol.vol.volume_context)
    try:
        ctx = vol.controller_publish()
        assert ctx["key"] and ctx["user"].startswith("strata.") and ctx["fs_name"]
        assert ctx["monitors"].startswith("10.78.0.1:") and ctx["ms_mode"] == "prefer-crc"
        assert len(ceph_keys(app, vol)) == 1
        vol.stage(guest)
        vol.publish()
        guest.sh(f"cat > {vol.target}/shard.bin && sync", stdin=blob)
        mounted = guest.sh(f"grep ' {vol.staging} ' /proc/mounts").decode()
        assert " ceph " in mounted and ctx["key"] not in mounted, mounted
        stats = node.NodeGetVolumeStats(csi_pb2.NodeGetVolumeStatsRequest(
            volume_id=vol.vol.volume_id, volume_path=vol.target), timeout=60)
        assert stats.usage[0].total > 0
    finally:
        vol.unpublish_and_unstage()
        vol.unpublish_and_unstage()  # idempotent
    assert_left_nothing(guest, vol)
    fs = rest(app, "GET", f"filesystems/{vol.vol.volume_context['name']}/")
    assert Path(fs["path"], "shard.bin").read_bytes() == blob
    controller.ControllerUnpublishVolume(csi_pb2.ControllerUnpublishVolumeRequest(
        volume_id=vol.vol.volume_id, node_id=node_id), timeout=120)
    assert ceph_keys(app, vol) == []  # the node's key is revoked
    vol.delete()


def test_cephfs_key_of_one_volume_is_refused_on_another_leaving_nothing_mounted(
        app, ceph_pool, controller, guest, node, node_id):
    params = {"protocol": "cephfs", "pool": ceph_pool}
    mine = Staged(controller, node, node_id, "pvc-cephfs-mine", SHARED, params)
    other = Staged(controller, node, node_id, "pvc-cephfs-other", SHARED, params)
    try:
        key = mine.controller_publish()
        where = other.controller_publish()
        other.context = {**where, "user": key["user"], "key": key["key"]}  # mine's key
        with pytest.raises(grpc.RpcError) as err:
            other.stage(guest)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, err.value.details()
        assert other.vol.volume_id in err.value.details()
        assert_left_nothing(guest, other)
        assert " ceph " not in guest.sh("cat /proc/mounts").decode()
    finally:
        other.unpublish_and_unstage()  # what a CO does next: nothing to do, no error
        other.delete()
        mine.delete()


def test_cephfs_read_only_publish_gets_a_read_only_key_and_mount(
        app, ceph_pool, controller, guest, node, node_id):
    reader = mount_cap(Mode.MULTI_NODE_READER_ONLY)
    vol = Staged(controller, node, node_id, "pvc-cephfs-ro", reader,
                 {"protocol": "cephfs", "pool": ceph_pool})
    fs = rest(app, "GET", f"filesystems/{vol.vol.volume_context['name']}/")
    Path(fs["path"], "model.bin").write_bytes(b"weights")
    try:
        vol.controller_publish()
        keys = rest(app, "GET", f"filesystems/{fs['name']}/ceph-keys/")
        assert [k["read_only"] for k in keys] == [True], keys
        vol.stage(guest)
        vol.publish()
        assert guest.sh(f"cat {vol.target}/model.bin") == b"weights"
        rc, _, err = guest.run(["sh", "-c", f"echo x > {vol.target}/new"])
        assert rc != 0 and "Read-only file system" in err, err
    finally:
        vol.unpublish_and_unstage()
    assert_left_nothing(guest, vol)
    vol.delete()


def test_cephfs_needs_a_ceph_pool_and_a_published_key(app, controller, guest, node):
    with pytest.raises(grpc.RpcError) as err:
        controller.CreateVolume(csi_pb2.CreateVolumeRequest(
            name="pvc-cephfs-local", volume_capabilities=[SHARED],
            parameters={"protocol": "cephfs", "pool": "default"}), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ceph pool" in err.value.details(), err.value.details()
    staging = "/var/lib/kubelet/plugins/csi.strata.io/unpublished/globalmount"
    guest.sh(f"mkdir -p {staging}")
    with pytest.raises(grpc.RpcError) as err:
        node.NodeStageVolume(csi_pb2.NodeStageVolumeRequest(
            volume_id="filesystem/csi-000000000000000000000000", staging_target_path=staging,
            volume_capability=SHARED, volume_context={"protocol": "cephfs"}), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ControllerPublished" in err.value.details(), err.value.details()
