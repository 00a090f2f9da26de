"""The CSI Controller service: volumes, snapshots and capacity through the plane's REST API.

Mount access gives a Strata file system (shared by any number of nodes); block access gives a
Strata volume (one node at a time). Every call is idempotent by name: the CSI name maps to one
Strata name (services.csi.volumes), so a retried CreateVolume finds what the first made."""
from datetime import datetime

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from plumbing.restclient import ApiError
from services.csi import publish, topology
from services.csi import volumes as v
from services.csi.errors import CsiError, require, rpc
from services.csi.plane import get_or_none, list_all
from services.csi.proto import csi_pb2, csi_pb2_grpc

Mode = csi_pb2.VolumeCapability.AccessMode.Mode
SINGLE_NODE_MODES = (Mode.SINGLE_NODE_WRITER, Mode.SINGLE_NODE_READER_ONLY)
READ_ONLY_MODES = (Mode.SINGLE_NODE_READER_ONLY, Mode.MULTI_NODE_READER_ONLY)
RPC = csi_pb2.ControllerServiceCapability.RPC
CAPABILITIES = (RPC.CREATE_DELETE_VOLUME, RPC.LIST_VOLUMES, RPC.GET_CAPACITY,
                RPC.CREATE_DELETE_SNAPSHOT, RPC.LIST_SNAPSHOTS, RPC.CLONE_VOLUME,
                RPC.EXPAND_VOLUME, RPC.GET_VOLUME, RPC.PUBLISH_UNPUBLISH_VOLUME)


def _not_found(what: str) -> CsiError:
    return CsiError(grpc.StatusCode.NOT_FOUND, f"{what} does not exist")


def _block_access(capabilities) -> bool:
    """True for block access, False for mount; INVALID_ARGUMENT for a mix or neither."""
    kinds = set()
    for cap in capabilities:
        kind = cap.WhichOneof("access_type")
        if kind is None:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           "a volume capability needs an access type (block or mount)")
        if cap.access_mode.mode == Mode.UNKNOWN:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           "a volume capability needs an access mode")
        kinds.add(kind)
    if len(kinds) > 1:
        raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                       "block and mount access cannot be asked of one volume")
    return kinds == {"block"}


def unsupported(kind: str, capabilities) -> str | None:
    """Why a volume of ``kind`` cannot serve these capabilities, or None when it can. A file
    system serves mounts in every mode; a block volume serves one node at a time."""
    for cap in capabilities:
        if kind == "filesystem" and cap.WhichOneof("access_type") == "block":
            return "a file system cannot be used with block access"
        if kind == "volume" and cap.access_mode.mode not in SINGLE_NODE_MODES:
            return (f"a block volume serves one node at a time, not "
                    f"{Mode.Name(cap.access_mode.mode)}")
        if cap.WhichOneof("access_type") == "mount" and cap.mount.fs_type not in ("", "ext4",
                                                                                  "xfs"):
            if kind == "volume" or cap.mount.fs_type not in ("nfs", "nfs4", "ceph"):
                return f"file system type {cap.mount.fs_type} is not offered"
    return None


def _candidate_pools(placement: dict, protocol: str) -> list[str]:
    """Pools a volume of ``protocol`` may go to when the StorageClass names none: the plane's
    ``default`` first, then the others by name (cephfs: ceph pools; nvmeof: spdk pools; the
    others: any but spdk)."""
    def fits(row):
        if protocol == "cephfs":
            return row.get("driver") == "ceph"
        return (row.get("driver") == "spdk") == (protocol == "nvmeof")
    names = sorted(placement, key=lambda name: (name != "default", name))
    return [name for name in names if fits(placement[name])]


def _timestamp(iso: str) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(datetime.fromisoformat(iso.replace("Z", "+00:00")))
    return stamp


def _capacity(kind: str, row: dict) -> int:
    return (row.get("size_bytes") if kind == "volume" else row.get("quota_bytes")) or 0


class Controller(csi_pb2_grpc.ControllerServicer):
    """``plane``: a services.csi.plane.PlaneConfig."""

    def __init__(self, plane):
        self.plane = plane

    # -- volumes ---------------------------------------------------------------------------

    def _volume(self, row: dict, kind: str, sc: v.StorageClass | None = None,
                source=None, placement: dict | None = None) -> csi_pb2.Volume:
        context = {"kind": kind, "name": row["name"], "pool": row.get("pool") or ""}
        if sc is not None:
            context["protocol"] = sc.protocol
            context.update(sc.qos_context)
        if kind == "filesystem" and row.get("path"):
            context["path"] = row["path"]
        return csi_pb2.Volume(volume_id=str(v.VolumeId(kind, row["name"])),
                              capacity_bytes=_capacity(kind, row), volume_context=context,
                              content_source=source,
                              accessible_topology=topology.accessible(
                                  placement or {}, row.get("pool") or "", kind))

    @rpc
    def CreateVolume(self, request, context):
        require(request.name, "name")
        require(request.volume_capabilities, "volume_capabilities")
        sc = v.StorageClass.from_parameters(dict(request.parameters),
                                            _block_access(request.volume_capabilities))
        why = unsupported(sc.kind, request.volume_capabilities)
        if why:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, why)
        required = request.capacity_range.required_bytes
        limit = request.capacity_range.limit_bytes
        if sc.kind == "volume":
            size = v.size_in_range(required, limit, granularity=v.MIB,
                                   default=v.DEFAULT_VOLUME_BYTES)
        else:
            size = v.size_in_range(required, limit) if sc.quota else 0
        name = v.object_name(request.name)
        client = self.plane.client(request.secrets)
        source = request.volume_content_source if request.HasField(
            "volume_content_source") else None
        requisite, preferred = [], []
        if request.HasField("accessibility_requirements"):
            wanted = request.accessibility_requirements
            requisite = topology.nodes_of(wanted.requisite,
                                          "accessibility_requirements.requisite")
            preferred = topology.nodes_of(wanted.preferred,
                                          "accessibility_requirements.preferred")
        placement = topology.pools(client)

        existing = get_or_none(client, f"{sc.kind}s/{name}/")
        other = "volume" if sc.kind == "filesystem" else "filesystem"
        if existing is None and get_or_none(client, f"{other}s/{name}/") is not None:
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                           f"volume {request.name} exists as a {other}, not a {sc.kind}")
        if existing is not None:
            if sc.quota and not v.fits(_capacity(sc.kind, existing) or None, required, limit):
                raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                               f"volume {request.name} exists with another capacity "
                               f"({_capacity(sc.kind, existing)} bytes)")
            if sc.pool and existing.get("pool") != sc.pool:
                raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                               f"volume {request.name} exists on pool {existing.get('pool')}")
            return csi_pb2.CreateVolumeResponse(
                volume=self._volume(existing, sc.kind, sc, source, placement))

        pool_name = sc.pool
        if requisite or preferred:
            if sc.pool and sc.pool not in placement:
                raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"pool {sc.pool} (StorageClass parameter pool) does not exist")
            candidates = [sc.pool] if sc.pool else _candidate_pools(placement, sc.protocol)
            pool_name = topology.choose_pool(placement, candidates, sc.kind, requisite,
                                             preferred)

        if sc.protocol == "cephfs":
            pool = get_or_none(client, f"pools/{pool_name or 'default'}/")
            if pool is None or pool.get("driver") != "ceph":
                raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"protocol cephfs needs a ceph pool; pool "
                               f"{pool_name or 'default'} "
                               + ("does not exist" if pool is None
                                  else f"has the {pool.get('driver')} driver"))
        try:
            if source is None:
                body = {"name": name}
                if pool_name:
                    body["pool"] = pool_name
                if sc.kind == "volume":
                    body["size_bytes"] = size
                elif size:
                    body["quota_bytes"] = size
                row = client.post(f"{sc.kind}s/", body)
            else:
                row = self._create_from(client, request, sc, name, size, source)
        except ApiError as exc:
            error = self._exhausted(client, exc, sc, size)
            if error is exc:
                raise
            raise error from exc
        return csi_pb2.CreateVolumeResponse(
            volume=self._volume(row, sc.kind, sc, source, placement))

    @staticmethod
    def _exhausted(client, exc: ApiError, sc: v.StorageClass, size: int) -> Exception:
        """RESOURCE_EXHAUSTED when the plane refused a quota because the pool is smaller
        (it says 400 on quota_bytes: a request it can never take), else ``exc`` itself."""
        fields = exc.body.get("fields") if isinstance(exc.body, dict) else None
        if exc.status == 400 and isinstance(fields, dict) and "quota_bytes" in fields:
            pool = get_or_none(client, f"pools/{sc.pool or 'default'}/") or {}
            if pool.get("size_bytes") and size > pool["size_bytes"]:
                return CsiError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"pool {pool['name']} has {pool['size_bytes']} bytes, "
                                f"less than the {size} asked")
        return exc

    def _create_from(self, client, request, sc, name, size, source) -> dict:
        """A clone of a snapshot, or of a volume through a snapshot taken for it."""
        if source.WhichOneof("type") == "snapshot":
            snap_id = v.parse_snapshot_id(source.snapshot.snapshot_id)
            snap = get_or_none(client, f"snapshots/{snap_id}/") if snap_id else None
            if snap is None or not v.is_csi_object(snap["name"]):
                raise _not_found(f"snapshot {source.snapshot.snapshot_id}")
        else:
            vid = v.VolumeId.parse(source.volume.volume_id)
            origin = get_or_none(client, vid.collection + f"{vid.name}/") if vid else None
            if origin is None:
                raise _not_found(f"volume {source.volume.volume_id}")
            snap = self._clone_source(client, vid, v.clone_source_name(request.name))
        snap_kind = "filesystem" if snap.get("filesystem") else "volume"
        if snap_kind != sc.kind:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"the source is a {snap_kind}; this StorageClass makes a {sc.kind}")
        body = {"name": name}
        if sc.kind == "volume":
            origin_size = get_or_none(client, f"volumes/{snap['volume']}/")
            origin_size = (origin_size or {}).get("size_bytes", 0)
            limit = request.capacity_range.limit_bytes
            if limit and origin_size > limit:
                raise CsiError(grpc.StatusCode.OUT_OF_RANGE,
                               f"the source has {origin_size} bytes, above limit_bytes {limit}")
            if size > origin_size:
                body["size_bytes"] = size
        elif size:
            body["quota_bytes"] = size
        return client.post(f"snapshots/{snap['id']}/clone/", body)

    @staticmethod
    def _clone_source(client, vid: v.VolumeId, snap_name: str) -> dict:
        for snap in list_all(client, "snapshots/", **{vid.kind: vid.name}):
            if snap["name"] == snap_name:
                return snap
        return client.post("snapshots/", {"name": snap_name, vid.kind: vid.name})

    @rpc
    def DeleteVolume(self, request, context):
        require(request.volume_id, "volume_id")
        vid = v.VolumeId.parse(request.volume_id)
        if vid is None:  # not one of ours: nothing to delete
            return csi_pb2.DeleteVolumeResponse()
        client = self.plane.client(request.secrets)
        row = get_or_none(client, vid.collection + f"{vid.name}/")
        if row is None:
            return csi_pb2.DeleteVolumeResponse()
        snaps = list_all(client, "snapshots/", **{vid.kind: vid.name})
        kept = [s["name"] for s in snaps if not v.is_clone_source(s["name"])]
        if kept:
            # the plane deletes a volume's snapshots with it; a CSI snapshot must outlive that
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION,
                           f"volume {request.volume_id} has snapshots ({len(kept)}); delete "
                           "the VolumeSnapshots first")
        publish.forget(client, vid.name)
        try:
            client.delete(vid.collection + f"{vid.name}/")
        except ApiError as exc:
            if exc.status != 404:
                raise
        origin = row.get("origin") or ""
        source, _, snap_name = origin.partition("@")
        if v.is_clone_source(snap_name):  # the snapshot taken only to make this clone
            for snap in list_all(client, "snapshots/", **{vid.kind: source}):
                if snap["name"] == snap_name and not snap.get("clones"):
                    client.request("DELETE", f"snapshots/{snap['id']}/", ok=(204, 404))
        return csi_pb2.DeleteVolumeResponse()

    @rpc
    def ControllerPublishVolume(self, request, context):
        require(request.volume_id, "volume_id")
        require(request.node_id, "node_id")
        if not request.HasField("volume_capability"):
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "volume_capability is required")
        _block_access([request.volume_capability])
        vid = v.VolumeId.parse(request.volume_id)
        client = self.plane.client(request.secrets)
        if vid is None or get_or_none(client, vid.collection + f"{vid.name}/") is None:
            raise _not_found(f"volume {request.volume_id}")
        node = publish.NodeIdentity.parse(request.node_id)
        if node is None:
            raise _not_found(f"node {request.node_id}")
        why = unsupported(vid.kind, [request.volume_capability])
        if why:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, why)
        read_only = (request.readonly
                     or request.volume_capability.access_mode.mode in READ_ONLY_MODES)
        context_ = publish.publish(client, vid.kind, vid.name, node, read_only,
                                   request.volume_context.get("protocol", ""),
                                   v.qos_from_context(request.volume_context))
        return csi_pb2.ControllerPublishVolumeResponse(publish_context=context_)

    @rpc
    def ControllerUnpublishVolume(self, request, context):
        require(request.volume_id, "volume_id")
        vid = v.VolumeId.parse(request.volume_id)
        node = publish.NodeIdentity.parse(request.node_id) if request.node_id else None
        if vid is not None:  # an unknown volume or node is unpublished already
            client = self.plane.client(request.secrets)
            if node is not None:
                publish.unpublish(client, vid.kind, vid.name, node)
            else:
                for group in publish.groups_of(vid.name).values():
                    row = get_or_none(client, f"host-groups/{group}/")
                    if row and row["hosts"]:
                        client.patch(f"host-groups/{group}/", {"hosts": []})
                if vid.kind == "filesystem":
                    publish.cephfs_revoke(client, vid.name)
        return csi_pb2.ControllerUnpublishVolumeResponse()

    @rpc
    def ValidateVolumeCapabilities(self, request, context):
        require(request.volume_id, "volume_id")
        require(request.volume_capabilities, "volume_capabilities")
        _block_access(request.volume_capabilities)
        vid = v.VolumeId.parse(request.volume_id)
        client = self.plane.client(request.secrets)
        if vid is None or get_or_none(client, vid.collection + f"{vid.name}/") is None:
            raise _not_found(f"volume {request.volume_id}")
        why = unsupported(vid.kind, request.volume_capabilities)
        if why:
            return csi_pb2.ValidateVolumeCapabilitiesResponse(message=why)
        return csi_pb2.ValidateVolumeCapabilitiesResponse(
            confirmed=csi_pb2.ValidateVolumeCapabilitiesResponse.Confirmed(
                volume_context=request.volume_context,
                volume_capabilities=request.volume_capabilities,
                parameters=request.parameters))

    def _csi_rows(self, client) -> list[tuple[str, dict, str]]:
        rows = []
        for kind in v.KINDS:
            for row in list_all(client, f"{kind}s/"):
                if v.is_csi_object(row["name"]):
                    rows.append((str(v.VolumeId(kind, row["name"])), row, kind))
        return sorted(rows, key=lambda r: r[0])

    @rpc
    def ListVolumes(self, request, context):
        if request.max_entries < 0:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "max_entries cannot be negative")
        token = request.starting_token
        if token and v.VolumeId.parse(token) is None:
            raise CsiError(grpc.StatusCode.ABORTED, f"starting_token {token!r} is not valid")
        rows = [r for r in self._csi_rows(self.plane.client()) if not token or r[0] > token]
        page = rows[:request.max_entries] if request.max_entries else rows
        next_token = page[-1][0] if len(page) < len(rows) else ""
        return csi_pb2.ListVolumesResponse(
            entries=[csi_pb2.ListVolumesResponse.Entry(volume=self._volume(row, kind))
                     for _, row, kind in page],
            next_token=next_token)

    @rpc
    def ControllerGetVolume(self, request, context):
        require(request.volume_id, "volume_id")
        vid = v.VolumeId.parse(request.volume_id)
        row = get_or_none(self.plane.client(), vid.collection + f"{vid.name}/") if vid else None
        if row is None:
            raise _not_found(f"volume {request.volume_id}")
        return csi_pb2.ControllerGetVolumeResponse(volume=self._volume(row, vid.kind))

    @rpc
    def GetCapacity(self, request, context):
        pool = request.parameters.get("pool") or "default"
        client = self.plane.client()
        if request.HasField("accessible_topology"):
            nodes = topology.nodes_of([request.accessible_topology], "accessible_topology")
            kind = ("volume" if request.parameters.get("protocol") in v.BLOCK_PROTOCOLS
                    else "filesystem")
            if not set(nodes) & set(topology.served_by(topology.pools(client), pool, kind)):
                return csi_pb2.GetCapacityResponse(available_capacity=0,
                                                   minimum_volume_size={"value": v.MIB})
        row = get_or_none(client, f"pools/{pool}/")
        return csi_pb2.GetCapacityResponse(
            available_capacity=(row or {}).get("free_bytes") or 0,
            minimum_volume_size={"value": v.MIB})

    @rpc
    def ControllerExpandVolume(self, request, context):
        require(request.volume_id, "volume_id")
        if not request.HasField("capacity_range"):
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "capacity_range is required")
        vid = v.VolumeId.parse(request.volume_id)
        client = self.plane.client(request.secrets)
        row = get_or_none(client, vid.collection + f"{vid.name}/") if vid else None
        if row is None:
            raise _not_found(f"volume {request.volume_id}")
        required = request.capacity_range.required_bytes
        limit = request.capacity_range.limit_bytes
        current = _capacity(vid.kind, row)
        if vid.kind == "volume":
            size = v.size_in_range(required, limit, granularity=v.MIB)
            if size > current:
                row = client.post(f"volumes/{vid.name}/resize/", {"size_bytes": size})
        else:
            size = v.size_in_range(required, limit)
            if current and size > current:  # a file system without a quota has no size
                row = client.patch(f"filesystems/{vid.name}/", {"quota_bytes": size})
        return csi_pb2.ControllerExpandVolumeResponse(
            capacity_bytes=_capacity(vid.kind, row),
            node_expansion_required=vid.kind == "volume")  # the file system on it grows

    # -- snapshots -------------------------------------------------------------------------

    @staticmethod
    def _snapshot(row: dict, sizes: dict) -> csi_pb2.Snapshot:
        kind = "filesystem" if row.get("filesystem") else "volume"
        source = row.get(kind)
        return csi_pb2.Snapshot(
            snapshot_id=f"snapshot/{row['id']}",
            source_volume_id=str(v.VolumeId(kind, source)),
            size_bytes=sizes.get((kind, source), 0),
            creation_time=_timestamp(row["created_at"]),
            ready_to_use=row.get("state") == "online")

    @staticmethod
    def _sizes(client) -> dict:
        return {(kind, row["name"]): _capacity(kind, row)
                for kind in v.KINDS for row in list_all(client, f"{kind}s/")
                if v.is_csi_object(row["name"])}

    @rpc
    def CreateSnapshot(self, request, context):
        require(request.name, "name")
        require(request.source_volume_id, "source_volume_id")
        vid = v.VolumeId.parse(request.source_volume_id)
        client = self.plane.client(request.secrets)
        source = get_or_none(client, vid.collection + f"{vid.name}/") if vid else None
        if source is None:
            raise _not_found(f"volume {request.source_volume_id}")
        name = v.object_name(request.name)
        sizes = {(vid.kind, vid.name): _capacity(vid.kind, source)}
        for snap in list_all(client, "snapshots/"):
            if snap["name"] != name:
                continue
            if snap.get(vid.kind) == vid.name:
                return csi_pb2.CreateSnapshotResponse(snapshot=self._snapshot(snap, sizes))
            raise CsiError(grpc.StatusCode.ALREADY_EXISTS,
                           f"snapshot {request.name} exists for another volume")
        snap = client.post("snapshots/", {"name": name, vid.kind: vid.name})
        return csi_pb2.CreateSnapshotResponse(snapshot=self._snapshot(snap, sizes))

    @rpc
    def DeleteSnapshot(self, request, context):
        require(request.snapshot_id, "snapshot_id")
        snap_id = v.parse_snapshot_id(request.snapshot_id)
        if snap_id is None:
            return csi_pb2.DeleteSnapshotResponse()
        client = self.plane.client(request.secrets)
        snap = get_or_none(client, f"snapshots/{snap_id}/")
        if snap is not None and v.is_csi_object(snap["name"]):
            client.request("DELETE", f"snapshots/{snap_id}/", ok=(204, 404))
        return csi_pb2.DeleteSnapshotResponse()

    @rpc
    def ListSnapshots(self, request, context):
        if request.max_entries < 0:
            raise CsiError(grpc.StatusCode.INVALID_ARGUMENT, "max_entries cannot be negative")
        token = request.starting_token
        if token and not token.isdigit():
            raise CsiError(grpc.StatusCode.ABORTED, f"starting_token {token!r} is not valid")
        client = self.plane.client(request.secrets)
        params = {}
        if request.source_volume_id:
            vid = v.VolumeId.parse(request.source_volume_id)
            if vid is None:
                return csi_pb2.ListSnapshotsResponse()
            params[vid.kind] = vid.name
        rows = [s for s in list_all(client, "snapshots/", **params)
                if v.is_csi_object(s["name"])]
        if request.snapshot_id:
            wanted = v.parse_snapshot_id(request.snapshot_id)
            rows = [s for s in rows if s["id"] == wanted]
        rows = sorted((s for s in rows if not token or s["id"] > int(token)),
                      key=lambda s: s["id"])
        page = rows[:request.max_entries] if request.max_entries else rows
        next_token = str(page[-1]["id"]) if len(page) < len(rows) else ""
        sizes = self._sizes(client) if page else {}
        return csi_pb2.ListSnapshotsResponse(
            entries=[csi_pb2.ListSnapshotsResponse.Entry(snapshot=self._snapshot(s, sizes))
                     for s in page],
            next_token=next_token)

    # -- capabilities ----------------------------------------------------------------------

    @rpc
    def ControllerGetCapabilities(self, request, context):
        cap = csi_pb2.ControllerServiceCapability
        return csi_pb2.ControllerGetCapabilitiesResponse(
            capabilities=[cap(rpc=cap.RPC(type=t)) for t in CAPABILITIES])
