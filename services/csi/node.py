"""The CSI Node service: stage a volume once per node, bind-publish it into each pod's path.

Staging by protocol (the volume context names it; the publish context of
ControllerPublishVolume says where the export is):

- ``local`` (a hyperconverged node: the file system lives on this host's own pool, at the
  path the plane reports): a bind mount;
- ``nfs``: an NFSv4.1 mount of the export the controller made for this node;
- ``cephfs``: a kernel CephFS mount of the file system's directory with the cephx key
  ControllerPublishVolume made for this node (publish context ``user``, ``key``), or the
  node-stage secrets ``userID``/``userKey`` when the CO passes them (ceph-csi's names);
- ``iscsi``, ``nvmeof``: a login (open-iscsi) or a connect (nvme-cli) to the volume's export;
  with mount access a file system is made on it when blkid finds none (ext4, or the
  capability's fs_type) and mounted on the staging path; with block access the device node is
  bound onto ``<staging>/device``.

Nothing is kept by the plugin: unpublish and unstage read the mount table (and sysfs for a
device's session), so they are idempotent and work after a restart. A stage that fails leaves
nothing mounted or logged in."""
import errno
import os
import socket
import stat

import grpc

from services.csi import attach, mounts, topology
from services.csi.errors import CsiError, require, rpc
from services.csi.publish import NodeIdentity
from services.csi.proto import csi_pb2, csi_pb2_grpc

NODE_RPC = csi_pb2.NodeServiceCapability.RPC
CAPABILITIES = (NODE_RPC.STAGE_UNSTAGE_VOLUME, NODE_RPC.GET_VOLUME_STATS,
                NODE_RPC.EXPAND_VOLUME)
STAGED_PROTOCOLS = ("local", "nfs", "cephfs", "iscsi", "nvmeof")
BLOCK_PROTOCOLS = ("iscsi", "nvmeof")
FS_TYPES = ("ext4", "xfs")
DEVICE = "device"  # <staging>/device: the bind of a raw block volume's device node
Mode = csi_pb2.VolumeCapability.AccessMode.Mode
READ_ONLY_MODES = (Mode.SINGLE_NODE_READER_ONLY, Mode.MULTI_NODE_READER_ONLY)


def _capability(cap):
    if cap is None or cap.WhichOneof("access_type") is None:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "volume_capability is required")
    return cap


def _is_block(cap) -> bool:
    return cap.WhichOneof("access_type") == "block"


def _device_of(info: dict) -> str:
    """The block device a mount shows: its source (a file system on it), or the devtmpfs
    root of a device node bound somewhere."""
    if info["fstype"] in ("devtmpfs", "tmpfs") or not info["source"].startswith("/dev/"):
        return "/dev" + info["root"] if info["fstype"] == "devtmpfs" else ""
    return info["source"] if info["root"] == "/" else ""


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
        vol = require(request.volume_id, "volume_id")
        staging = require(request.staging_target_path, "staging_target_path")
        cap = _capability(request.volume_capability if request.HasField("volume_capability")
                          else None)
        protocol = request.volume_context.get("protocol", "")
        if protocol not in STAGED_PROTOCOLS:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"volume {vol}: staging over {protocol or 'an unnamed protocol'} "
                           f"is not implemented by this node plugin (it stages "
                           f"{', '.join(STAGED_PROTOCOLS)})")
        if _is_block(cap) and protocol not in BLOCK_PROTOCOLS:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"volume {vol}: raw block access needs iscsi or nvmeof")
        if not os.path.isdir(staging):
            raise CsiError(grpc.StatusCode.NOT_FOUND, f"staging path {staging} does not exist")
        point = os.path.join(staging, DEVICE) if _is_block(cap) else staging
        if mounts.is_mount_point(point):
            self._check_staged(vol, point, protocol, request)
            return csi_pb2.NodeStageVolumeResponse()
        if protocol == "local":
            self._stage_local(request, staging)
        elif protocol == "nfs":
            self._stage_nfs(request, staging, cap)
        elif protocol == "cephfs":
            self._stage_cephfs(request, staging, cap)
        else:
            self._stage_block(request, staging, cap, protocol)
        return csi_pb2.NodeStageVolumeResponse()

    def _check_staged(self, vol, point, protocol, request):
        mounted = mounts.mount_points()[os.path.realpath(point)]
        if protocol == "local" and not _same_source(mounted,
                                                    request.volume_context.get("path", "")):
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS, f"{point} has another volume staged")
        if protocol == "nfs" and not mounted["source"].endswith(
                ":" + request.publish_context.get("export", "\0")):
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS, f"{point} has another volume staged")
        if protocol == "cephfs" and (mounted["fstype"] != "ceph" or not mounted[
                "source"].endswith(":" + request.publish_context.get("path", "\0"))):
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS, f"{point} has another volume staged")

    @staticmethod
    def _stage_local(request, staging):
        source = request.volume_context.get("path", "")
        if not source or not os.path.isdir(source):
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id}: its file system is not on this host "
                           f"({source or 'no path in the volume context'})")
        mounts.bind(source, staging)

    @staticmethod
    def _stage_nfs(request, staging, cap):
        ctx = request.publish_context
        if not ctx.get("server") or not ctx.get("export"):
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"volume {request.volume_id}: the publish context names no NFS "
                           "export (server, export): was it ControllerPublished?")
        try:
            attach.nfs_mount(ctx["server"], ctx.get("port", ""), ctx["export"], staging,
                             read_only=cap.access_mode.mode in READ_ONLY_MODES)
        except attach.AttachError as exc:
            mounts.unmount(staging)
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id}: NFS export {ctx['server']}:"
                           f"{ctx['export']} cannot be mounted: {exc}") from exc

    @staticmethod
    def _stage_cephfs(request, staging, cap):
        ctx, vol = request.publish_context, request.volume_id
        user = request.secrets.get("userID") or ctx.get("user", "")
        key = request.secrets.get("userKey") or ctx.get("key", "")
        missing = [k for k in ("monitors", "path", "fs_name") if not ctx.get(k)]
        if missing or not user or not key:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"volume {vol}: the publish context lacks "
                           f"{', '.join(missing) or 'a cephx key (user, key)'}: was it "
                           "ControllerPublished?")
        try:
            attach.ceph_mount(ctx["monitors"], ctx["path"], staging, user=user, key=key,
                              fs_name=ctx["fs_name"], ms_mode=ctx.get("ms_mode", ""),
                              read_only=cap.access_mode.mode in READ_ONLY_MODES)
        except attach.CephMountError as exc:
            mounts.unmount(staging)
            code = {errno.EACCES: grpc.StatusCode.PERMISSION_DENIED,
                    errno.EPERM: grpc.StatusCode.PERMISSION_DENIED,
                    errno.ENOENT: grpc.StatusCode.NOT_FOUND}.get(exc.errno,
                                                                  grpc.StatusCode.UNAVAILABLE)
            raise CsiError(code, f"volume {vol}: CephFS {ctx['fs_name']}:{ctx['path']} "
                                 f"cannot be mounted as client.{user}: {exc.strerror}") from exc

    @staticmethod
    def _attach(request, protocol) -> tuple[str, str]:
        ctx = request.publish_context
        try:
            if protocol == "iscsi":
                where = f"{ctx['portal']} {ctx['target_iqn']} LUN {ctx['lun']}"
                return where, attach.iscsi_attach(ctx["portal"], ctx["target_iqn"],
                                                  str(ctx["lun"]))
            where = f"{ctx['traddr']}:{ctx['trsvcid']} {ctx['subsystem_nqn']}"
            return where, attach.nvme_attach(ctx["traddr"], ctx["trsvcid"],
                                             ctx["subsystem_nqn"])
        except KeyError as exc:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"volume {request.volume_id}: the publish context lacks {exc} (was "
                           "it ControllerPublished?)") from None
        except attach.AttachError as exc:
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id}: its {protocol} export cannot be "
                           f"reached: {exc}") from exc

    def _stage_block(self, request, staging, cap, protocol):
        where, device = self._attach(request, protocol)
        try:
            if _is_block(cap):
                point = os.path.join(staging, DEVICE)
                open(point, "a").close()
                mounts.bind(device, point)
                return
            kind = cap.mount.fs_type or "ext4"
            if kind not in FS_TYPES:
                raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"fs_type {kind} is not offered ({', '.join(FS_TYPES)})")
            found = attach.fs_type(device)
            if not found:
                attach.make_fs(device, kind)
            elif found != kind:
                raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"volume {request.volume_id} holds {found}, not {kind}")
            mounts.mount(device, staging, kind, list(cap.mount.mount_flags))
        except BaseException as exc:
            mounts.unmount(os.path.join(staging, DEVICE))
            mounts.unmount(staging)
            attach.detach(device)
            if isinstance(exc, OSError):
                raise CsiError(grpc.StatusCode.INTERNAL,
                               f"volume {request.volume_id} ({where}): {exc}") from exc
            raise

    @rpc
    def NodeUnstageVolume(self, request, context):
        require(request.volume_id, "volume_id")
        staging = require(request.staging_target_path, "staging_target_path")
        table = mounts.mount_points()
        devices = []
        for point in (os.path.join(staging, DEVICE), staging):
            info = table.get(os.path.realpath(point))
            if info is not None:
                devices.append(_device_of(info))
                mounts.unmount(point)
        if os.path.isfile(os.path.join(staging, DEVICE)):
            os.unlink(os.path.join(staging, DEVICE))
        for device in filter(None, devices):
            # a block volume's device: let its session go unless something else holds it
            if not any(_device_of(i) == device for i in mounts.mount_points().values()):
                attach.detach(device)
        return csi_pb2.NodeUnstageVolumeResponse()

    @rpc
    def NodePublishVolume(self, request, context):
        require(request.volume_id, "volume_id")
        target = require(request.target_path, "target_path")
        staging = require(request.staging_target_path, "staging_target_path")
        cap = _capability(request.volume_capability if request.HasField("volume_capability")
                          else None)
        read_only = request.readonly or cap.access_mode.mode in READ_ONLY_MODES
        source = os.path.join(staging, DEVICE) if _is_block(cap) else staging
        if not mounts.is_mount_point(source):
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"volume {request.volume_id} is not staged at {staging}")
        if mounts.is_mount_point(target):
            have = mounts.mount_points()[os.path.realpath(target)]
            if ("ro" in have["options"]) != read_only:
                raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                               f"{target} is published with other options")
            return csi_pb2.NodePublishVolumeResponse()
        if _is_block(cap):
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            open(target, "a").close()  # a raw block volume is published as a device node
        else:
            os.makedirs(target, exist_ok=True)
        mounts.bind(source, target, read_only=read_only)
        return csi_pb2.NodePublishVolumeResponse()

    @rpc
    def NodeUnpublishVolume(self, request, context):
        require(request.volume_id, "volume_id")
        target = require(request.target_path, "target_path")
        mounts.unmount(target)
        try:  # NodePublishVolume made it; the spec says to remove it
            if os.path.isdir(target):
                os.rmdir(target)
            elif os.path.isfile(target):
                os.unlink(target)
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
        usage = csi_pb2.VolumeUsage
        if stat.S_ISBLK(os.stat(path).st_mode):
            return csi_pb2.NodeGetVolumeStatsResponse(usage=[
                usage(unit=usage.BYTES, total=attach.size_of(path))])
        st = os.statvfs(path)
        return csi_pb2.NodeGetVolumeStatsResponse(usage=[
            usage(unit=usage.BYTES, total=st.f_blocks * st.f_frsize,
                  available=st.f_bavail * st.f_frsize,
                  used=(st.f_blocks - st.f_bfree) * st.f_frsize),
            usage(unit=usage.INODES, total=st.f_files, available=st.f_favail,
                  used=st.f_files - st.f_ffree)])

    @rpc
    def NodeExpandVolume(self, request, context):
        """Grow the file system on a staged block volume to the device's new size (the
        controller grew the volume); nothing to do for raw block or a shared file system."""
        require(request.volume_id, "volume_id")
        path = require(request.volume_path, "volume_path")
        info = mounts.mount_points().get(os.path.realpath(path))
        if info is None:
            raise CsiError(grpc.StatusCode.NOT_FOUND,
                           f"volume {request.volume_id} is not staged or published at {path}")
        device = _device_of(info)
        if not device or not os.path.basename(device).startswith(("sd", "nvme")):
            return csi_pb2.NodeExpandVolumeResponse()
        attach.rescan(device)
        if info["fstype"] in FS_TYPES:
            try:
                attach.grow_fs(device, path, info["fstype"])
            except attach.AttachError as exc:
                raise CsiError(grpc.StatusCode.INTERNAL, str(exc)) from exc
        return csi_pb2.NodeExpandVolumeResponse(capacity_bytes=attach.size_of(device))

    @rpc
    def NodeGetCapabilities(self, request, context):
        cap = csi_pb2.NodeServiceCapability
        return csi_pb2.NodeGetCapabilitiesResponse(
            capabilities=[cap(rpc=cap.RPC(type=t)) for t in CAPABILITIES])

    @rpc
    def NodeGetInfo(self, request, context):
        return csi_pb2.NodeGetInfoResponse(node_id=str(self.identity),
                                           accessible_topology=topology.segment(
                                               self.identity.name))


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
