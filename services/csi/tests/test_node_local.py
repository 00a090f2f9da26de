"""The node plugin on the appliance's own host (the ``local`` protocol of a hyperconverged
node): a volume staged and published by bind mounts, bytes written through the pod's path
read back through Strata, a snapshot restored into a new volume, read-only publishing, and
unpublish/unstage that leave nothing mounted, also after the plugin restarted."""
import os
from pathlib import Path

import grpc
import pytest
import requests

from services.csi import mounts
from services.csi.proto import csi_pb2
from services.csi.tests.test_controller_faults import mount_cap

pytestmark = pytest.mark.root

Mode = csi_pb2.VolumeCapability.AccessMode.Mode
MiB = 1 << 20


def plane_get(app, path):
    r = requests.get(f"{app.url}/api/v1/{path}", timeout=30,
                     headers={"Authorization": f"Token {app.credentials['token']}"})
    r.raise_for_status()
    return r.json()


def stage_and_publish(node, vol, staging: Path, target: Path, readonly=False):
    cap = mount_cap()
    node.NodeStageVolume(csi_pb2.NodeStageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging), volume_capability=cap,
        volume_context=vol.volume_context), timeout=30)
    node.NodePublishVolume(csi_pb2.NodePublishVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging), target_path=str(target),
        volume_capability=cap, readonly=readonly, volume_context=vol.volume_context),
        timeout=30)


def unpublish_and_unstage(node, vol, staging: Path, target: Path):
    node.NodeUnpublishVolume(csi_pb2.NodeUnpublishVolumeRequest(
        volume_id=vol.volume_id, target_path=str(target)), timeout=30)
    node.NodeUnstageVolume(csi_pb2.NodeUnstageVolumeRequest(
        volume_id=vol.volume_id, staging_target_path=str(staging)), timeout=30)


def test_local_volume_written_through_the_pod_path_is_read_back_through_strata(
        appliance, plugin, workdir):
    staging, target = workdir / "staging", workdir / "pod" / "mount"
    staging.mkdir()
    target.parent.mkdir()
    blob = os.urandom(3 * MiB)
    with plugin.channel() as ch:
        ctl, node = plugin.controller(ch), plugin.node(ch)
        vol = ctl.CreateVolume(csi_pb2.CreateVolumeRequest(
            name="pvc-local-1", capacity_range=csi_pb2.CapacityRange(required_bytes=64 * MiB),
            volume_capabilities=[mount_cap()], parameters={"protocol": "local"}),
            timeout=60).volume
        stage_and_publish(node, vol, staging, target)
        try:
            (target / "shard-0.bin").write_bytes(blob)
            fs = plane_get(appliance, f"filesystems/{vol.volume_context['name']}/")
            assert Path(fs["path"], "shard-0.bin").read_bytes() == blob
            stats = node.NodeGetVolumeStats(csi_pb2.NodeGetVolumeStatsRequest(
                volume_id=vol.volume_id, volume_path=str(target)), timeout=30)
            assert {u.unit for u in stats.usage} == {csi_pb2.VolumeUsage.BYTES,
                                                     csi_pb2.VolumeUsage.INODES}

            snap = ctl.CreateSnapshot(csi_pb2.CreateSnapshotRequest(
                name="snap-local-1", source_volume_id=vol.volume_id), timeout=60).snapshot
            (target / "shard-0.bin").write_bytes(b"after the snapshot")
        finally:
            unpublish_and_unstage(node, vol, staging, target)
        assert not mounts.is_mount_point(str(target)) and not mounts.is_mount_point(str(staging))
        assert not target.exists()  # NodePublishVolume made it, NodeUnpublishVolume removes it

        restored = ctl.CreateVolume(csi_pb2.CreateVolumeRequest(
            name="pvc-local-restored",
            capacity_range=csi_pb2.CapacityRange(required_bytes=64 * MiB),
            volume_capabilities=[mount_cap()], parameters={"protocol": "local"},
            volume_content_source=csi_pb2.VolumeContentSource(
                snapshot=csi_pb2.VolumeContentSource.SnapshotSource(
                    snapshot_id=snap.snapshot_id))), timeout=60).volume
        stage_and_publish(node, restored, staging, target, readonly=True)
        try:
            assert (target / "shard-0.bin").read_bytes() == blob
            with pytest.raises(OSError):
                (target / "new.bin").write_bytes(b"x")  # published read-only
        finally:
            unpublish_and_unstage(node, restored, staging, target)

        # a source with a snapshot is not deleted under it; in dependency order all goes
        with pytest.raises(grpc.RpcError) as err:
            ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=restored.volume_id), timeout=60)
        ctl.DeleteSnapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id),
                           timeout=60)
        ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
    names = {fs["name"] for fs in plane_get(appliance, "filesystems/?limit=1000")["results"]}
    assert vol.volume_context["name"] not in names
    assert restored.volume_context["name"] not in names


def test_unpublish_and_unstage_after_a_plugin_restart(appliance, plugin, workdir):
    staging, target = workdir / "staging", workdir / "target"
    staging.mkdir()
    with plugin.channel() as ch:
        vol = plugin.controller(ch).CreateVolume(csi_pb2.CreateVolumeRequest(
            name="pvc-local-restart", volume_capabilities=[mount_cap()],
            parameters={"protocol": "local", "quota": "false"}), timeout=60).volume
        stage_and_publish(plugin.node(ch), vol, staging, target)
    plugin.stop()
    plugin.start()  # the plugin keeps no state: the mount table says what is mounted
    with plugin.channel() as ch:
        node = plugin.node(ch)
        unpublish_and_unstage(node, vol, staging, target)
        unpublish_and_unstage(node, vol, staging, target)  # idempotent
        plugin.controller(ch).DeleteVolume(
            csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
    assert not mounts.is_mount_point(str(target)) and not mounts.is_mount_point(str(staging))


def test_an_nfs_stage_without_controller_publish_says_so(appliance, plugin, workdir):
    with plugin.channel() as ch:
        vol = plugin.controller(ch).CreateVolume(csi_pb2.CreateVolumeRequest(
            name="pvc-nfs-on-host", volume_capabilities=[mount_cap()],
            parameters={"protocol": "nfs"}), timeout=60).volume
        try:
            with pytest.raises(grpc.RpcError) as err:
                plugin.node(ch).NodeStageVolume(csi_pb2.NodeStageVolumeRequest(
                    volume_id=vol.volume_id, staging_target_path=str(workdir),
                    volume_capability=mount_cap(), volume_context=vol.volume_context),
                    timeout=30)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "ControllerPublished" in err.value.details()
            assert not mounts.is_mount_point(str(workdir))
        finally:
            plugin.controller(ch).DeleteVolume(
                csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
