"""The CSI Node service: stage a volume once per node, bind-publish it into each pod's path.

Staging by protocol: ``local`` (a hyperconverged node: the file system lives on this host's own
pool, reached at the path the plane reports) is a bind mount. NFS, CephFS, iSCSI and NVMe-oF
need the node's kernel clients and are not done yet: NodeStageVolume answers
FAILED_PRECONDITION naming the protocol. Unpublish and unstage are idempotent and work from
the mount table alone (also after a restart of the plugin)."""
import os
import socket

import grpc

from services.csi import mounts
from services.csi.errors import CsiError, require, rpc
from services.csi.publish import NodeIdentity
from services.csi.proto import csi_pb2, csi_pb2_grpc

NODE_RPC = csi_pb2.NodeServiceCapability.RPC
CAPABILITIES = (NODE_RPC.STAGE_UNSTAGE_VOLUME, NODE_RPC.GET_VOLUME_STATS)
STAGED_PROTOCOLS = ("local",)
Mode = csi_pb2.VolumeCapability.AccessMode.Mode
READ_ONLY_MODES = (Mode.SINGLE_NODE_READER_ONLY, Mode.MULTI_NODE_READER_ONLY)


def _capability(cap) -> None:
    if cap is None or cap.WhichOneof("access_type") is None:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "volume_capability is required")
    if cap.WhichOneof("access_type") == "block":
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                       "raw block access is not offered by this node plugin yet")


class Node(csi_pb2_grpc.NodeServicer):
    """``name``: the name the CO knows this node by (default: the host name); ``address``:
    where the appliance sees it from. NodeGetInfo's node id carries them with the node's
    iSCSI initiator name and NVMe host NQN, read from the files open-iscsi and nvme-cli keep,
    so that ControllerPublishVolume can grant this node access (services.csi.publish)."""

    def __init__(self, name: str | None = None, address: str = ""):
        self.identity = NodeIdentity(name or socket.gethostname(),
                                     address or _address_of(name or socket.gethostname()),
                                     _read_key("/etc/iscsi/initiatorname.iscsi",
                                               "InitiatorName="),
                                     _read_key("/etc/nvme/hostnqn", ""))

    @rpc
    def NodeStageVolume(self, request, context):
        require(request.volume_id, "volume_id")
        staging = require(request.staging_target_path, "staging_target_path")
        _capability(request.volume_capability if request.HasField("volume_capability")
                    else None)
        protocol = request.volume_context.get("protocol", "")
        if protocol not in STAGED_PROTOCOLS:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"volume {request.volume_id}: staging over {protocol or 'an unnamed protocol'} "
                           f"is not implemented by this node plugin (it stages "
                           f"{', '.join(STAGED_PROTOCOLS)})")
        source = request.volume_context.get("path", "")
        if not source or not os.path.isdir(source):
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id}: its file system is not on this host "
                           f"({source or 'no path in the volume context'})")
        if not os.path.isdir(staging):
            raise CsiError(grpc.StatusCode.NOT_FOUND, f"staging path {staging} does not exist")
        if mounts.is_mount_point(staging):
            mounted = mounts.mount_points()[os.path.realpath(staging)]
            if not _same_source(mounted, source):
                raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                               f"{staging} has another volume staged")
            return csi_pb2.NodeStageVolumeResponse()
        mounts.bind(source, staging)
        return csi_pb2.NodeStageVolumeResponse()

    @rpc
    def NodeUnstageVolume(self, request, context):
        require(request.volume_id, "volume_id")
        staging = require(request.staging_target_path, "staging_target_path")
        mounts.unmount(staging)
        return csi_pb2.NodeUnstageVolumeResponse()

    @rpc
    def NodePublishVolume(self, request, context):
        require(request.volume_id, "volume_id")
        target = require(request.target_path, "target_path")
        staging = require(request.staging_target_path, "staging_target_path")
        cap = request.volume_capability if request.HasField("volume_capability") else None
        _capability(cap)
        read_only = request.readonly or cap.access_mode.mode in READ_ONLY_MODES
        if not mounts.is_mount_point(staging):
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"volume {request.volume_id} is not staged at {staging}")
        if mounts.is_mount_point(target):
            have = mounts.mount_points()[os.path.realpath(target)]
            if ("ro" in have["options"]) != read_only:
                raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                               f"{target} is published with other options")
            return csi_pb2.NodePublishVolumeResponse()
        os.makedirs(target, exist_ok=True)
        mounts.bind(staging, target, read_only=read_only)
        return csi_pb2.NodePublishVolumeResponse()

    @rpc
    def NodeUnpublishVolume(self, request, context):
        require(request.volume_id, "volume_id")
        target = require(request.target_path, "target_path")
        mounts.unmount(target)
        if os.path.isdir(target):
            try:
                os.rmdir(target)  # NodePublishVolume made it; the spec says to remove it
            except OSError:
                pass
        return csi_pb2.NodeUnpublishVolumeResponse()

    @rpc
    def NodeGetVolumeStats(self, request, context):
        require(request.volume_id, "volume_id")
        path = require(request.volume_path, "volume_path")
        if not os.path.exists(path):
            raise CsiError(grpc.StatusCode.NOT_FOUND, f"volume path {path} does not exist")
        if not mounts.is_mount_point(path):
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id} is not published at {path}")
        st = os.statvfs(path)
        usage = csi_pb2.VolumeUsage
        return csi_pb2.NodeGetVolumeStatsResponse(usage=[
            usage(unit=usage.BYTES, total=st.f_blocks * st.f_frsize,
                  available=st.f_bavail * st.f_frsize,
                  used=(st.f_blocks - st.f_bfree) * st.f_frsize),
            usage(unit=usage.INODES, total=st.f_files, available=st.f_favail,
                  used=st.f_files - st.f_ffree)])

    @rpc
    def NodeGetCapabilities(self, request, context):
        cap = csi_pb2.NodeServiceCapability
        return csi_pb2.NodeGetCapabilitiesResponse(
            capabilities=[cap(rpc=cap.RPC(type=t)) for t in CAPABILITIES])

    @rpc
    def NodeGetInfo(self, request, context):
        return csi_pb2.NodeGetInfoResponse(node_id=str(self.identity))


def _same_source(mounted: dict, source: str) -> bool:
    """True when a bind mount shows ``source``: mountinfo gives the bound directory as the
    root inside its file system, which ends the source's path."""
    root = mounted["root"].rstrip("/")
    return os.path.realpath(source).endswith(root) if root else True


def _read_key(path: str, prefix: str) -> str:
    """The first line of ``path`` that starts with ``prefix``, without it ("" if none)."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.strip() and line.startswith(prefix):
                    return line.strip()[len(prefix):]
    except OSError:
        pass
    return ""


def _address_of(name: str) -> str:
    try:
        return socket.gethostbyname(name)
    except OSError:
        return ""
