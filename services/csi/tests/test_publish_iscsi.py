"""ControllerPublish of a block volume on a live appliance: the node (its initiator name in
its node id) is put into the volume's host group and the volume exported over iSCSI (tgtd);
a real initiator (libiscsi's tools) with that name reads the volume's capacity, one with
another name is refused, and after ControllerUnpublish the node is refused too."""
import subprocess

import grpc
import pytest

from services.csi.proto import csi_pb2
from services.csi.publish import NodeIdentity

pytestmark = pytest.mark.root

Mode = csi_pb2.VolumeCapability.AccessMode.Mode
MiB = 1 << 20
NODE_IQN = "iqn.2026-12.io.strata.test:csi-node-1"
OTHER_IQN = "iqn.2026-12.io.strata.test:someone-else"


def block_cap():
    return csi_pb2.VolumeCapability(
        block=csi_pb2.VolumeCapability.BlockVolume(),
        access_mode=csi_pb2.VolumeCapability.AccessMode(mode=Mode.SINGLE_NODE_WRITER))


def readcapacity(ctx: dict, initiator: str) -> subprocess.CompletedProcess:
    url = f"iscsi://{ctx['portal']}/{ctx['target_iqn']}/{ctx['lun']}"
    return subprocess.run(["iscsi-readcapacity16", "-i", initiator, url], capture_output=True,
                          text=True, timeout=60)


def test_publish_grants_the_node_and_unpublish_takes_it_back(appliance, plugin):
    node = str(NodeIdentity("node-1", address="127.0.0.1", iqn=NODE_IQN))
    with plugin.channel() as ch:
        ctl = plugin.controller(ch)
        vol = ctl.CreateVolume(csi_pb2.CreateVolumeRequest(
            name="pvc-block-1", capacity_range=csi_pb2.CapacityRange(required_bytes=32 * MiB),
            volume_capabilities=[block_cap()], parameters={"protocol": "iscsi"}),
            timeout=60).volume
        assert vol.volume_id.startswith("volume/") and vol.capacity_bytes == 32 * MiB
        publish = csi_pb2.ControllerPublishVolumeRequest(
            volume_id=vol.volume_id, node_id=node, volume_capability=block_cap(),
            volume_context=vol.volume_context)
        ctx = dict(ctl.ControllerPublishVolume(publish, timeout=60).publish_context)
        assert dict(ctl.ControllerPublishVolume(publish, timeout=60).publish_context) == ctx
        ok = readcapacity(ctx, NODE_IQN)
        assert ok.returncode == 0, ok.stderr
        assert f"Total size:{32 * MiB}" in ok.stdout
        assert readcapacity(ctx, OTHER_IQN).returncode != 0

        with pytest.raises(grpc.RpcError) as err:  # read-only is the export's, not a host's
            ctl.ControllerPublishVolume(csi_pb2.ControllerPublishVolumeRequest(
                volume_id=vol.volume_id, node_id=node, volume_capability=block_cap(),
                readonly=True, volume_context=vol.volume_context), timeout=60)
        assert err.value.code() in (grpc.StatusCode.ALREADY_EXISTS,
                                    grpc.StatusCode.INVALID_ARGUMENT)

        unpublish = csi_pb2.ControllerUnpublishVolumeRequest(volume_id=vol.volume_id,
                                                             node_id=node)
        ctl.ControllerUnpublishVolume(unpublish, timeout=60)
        ctl.ControllerUnpublishVolume(unpublish, timeout=60)  # idempotent
        assert readcapacity(ctx, NODE_IQN).returncode != 0
        ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=vol.volume_id), timeout=60)
