from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import BaseParser
from rest_framework.response import Response

from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from plumbing.errors import Conflict
from services.protection import backup as backups
from services.protection import (
    bucket_replication,
    bucket_snapshots,
    receiver,
    replication,
    schedules,
    tasks,
)
from services.protection.api import serializers as s
from services.protection.models import (
    Backup,
    BackupTarget,
    BucketReplication,
    Replica,
    Replication,
    ReplicationPeer,
    RestorePoint,
    SnapshotSchedule,
)
from services.protection import failback
from services.protection.api.streams import OperatorOnly, stream_response
from services.storage.api.serializers import FileSystemSerializer, VolumeSerializer


class SnapshotScheduleViewSet(viewsets.ModelViewSet):
    queryset = SnapshotSchedule.objects.select_related("filesystem", "volume")
    serializer_class = s.SnapshotScheduleSerializer
    lookup_field = "name"

    def perform_create(self, serializer):
        serializer.instance = schedules.create_schedule(**serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = schedules.update_schedule(serializer.instance,
                                                        **serializer.validated_data)

    def perform_destroy(self, schedule):
        schedules.delete_schedule(schedule)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def run(self, request, name=None):
        """Run the schedule now (snapshot and prune) as a job."""
        return job_accepted(tasks.start_schedule_run(self.get_object(), request.user), request)


class ReplicationPeerViewSet(viewsets.ModelViewSet):
    queryset = ReplicationPeer.objects.all()
    serializer_class = s.ReplicationPeerSerializer
    lookup_field = "name"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        peer = replication.check_peer(ReplicationPeer(**serializer.validated_data))
        if peer.state != "online":
            raise ValidationError({"url": f"The peer did not accept the token: {peer.error}"})
        peer.save()
        serializer.instance = peer

    def perform_update(self, serializer):
        peer = serializer.save()
        replication.check_peer(peer)

    def perform_destroy(self, peer):
        replication.require_idle_peer(peer)
        peer.delete()

    @extend_schema(request=None, responses=s.ReplicationPeerSerializer)
    @action(detail=True, methods=["post"])
    def check(self, request, name=None):
        """Call the peer now and record whether it answers and accepts the token."""
        return Response(self.get_serializer(replication.check_peer(self.get_object())).data)


class ReplicationViewSet(viewsets.ModelViewSet):
    queryset = Replication.objects.select_related("filesystem", "volume", "peer")
    serializer_class = s.ReplicationSerializer
    lookup_field = "name"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        serializer.instance = replication.create_replication(**serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = replication.update_replication(serializer.instance,
                                                             **serializer.validated_data)

    def perform_destroy(self, rep):
        replication.delete_replication(rep)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def sync(self, request, name=None):
        """Send the next snapshot to the peer now, as a job (409 while a failback is
        under way)."""
        rep = self.get_object()
        replication.require_no_failback(rep)
        return job_accepted(tasks.start_replication_run(rep, request.user), request)

    @extend_schema(request=s.FailbackSerializer,
                   responses={202: JobSerializer, 200: s.ReplicationSerializer})
    @action(detail=True, methods=["post"])
    def failback(self, request, name=None):
        """After a failover on the peer: bring the writes made there back here, roll this
        side back onto them in place (its own later writes kept in a snapshot), re-base
        the peer's replica; forward sync then resumes incrementally. A job; 409 when the
        replica was not promoted, when no snapshot is common, or while a run is under way.
        Running it again completes one that was cut short; ``{"abandon": true}`` forgets
        one that cannot complete (200, no job)."""
        rep = self.get_object()
        body = s.FailbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if body.validated_data["abandon"]:
            return Response(self.get_serializer(failback.abandon(rep)).data)
        failback.check_can_start(rep)
        return job_accepted(failback.start_failback(rep, request.user), request)


class ReplicaViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Replicas this appliance receives from peers (read by the sending peer too)."""

    queryset = Replica.objects.all()
    serializer_class = s.ReplicaSerializer
    lookup_field = "name"

    def retrieve(self, request, *args, **kwargs):
        return Response(receiver.replica_info(self.get_object()))

    @extend_schema(request=s.ReplicaPromoteSerializer, responses={201: dict})
    @action(detail=True, methods=["post"])
    def promote(self, request, name=None):
        """Failover: a writable file system or volume from the newest received snapshot."""
        body = s.ReplicaPromoteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        obj = receiver.promote(self.get_object(), body.validated_data["name"])
        ser = FileSystemSerializer if obj._meta.model_name == "filesystem" else VolumeSerializer
        return Response(ser(obj).data, status=status.HTTP_201_CREATED)

    # failback, called by the original side (see services/protection/failback.py)
    @extend_schema(request=s.ReplicaSnapshotSerializer, responses={201: dict})
    @action(detail=True, methods=["post"], url_path="failback-snapshot")
    def failback_snapshot(self, request, name=None):
        """Snapshot the promoted copy (the same name again returns the one taken)."""
        body = s.ReplicaSnapshotSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        snap = receiver.failback_snapshot(self.get_object(), body.validated_data["snapshot"])
        return Response({"snapshot": snap.name, "source": snap.source.name, "path": snap.path},
                        status=status.HTTP_201_CREATED)

    @extend_schema(responses={(200, "application/octet-stream"): bytes}, parameters=[
        OpenApiParameter("snapshot", str, required=True),
        OpenApiParameter("parent", str, required=True),
        OpenApiParameter("offset", int)])
    @action(detail=True, methods=["get"], url_path="failback-stream",
            permission_classes=[OperatorOnly])
    def failback_stream(self, request, name=None):
        """The promoted copy's send stream of ``snapshot`` (incremental on ``parent``) from
        byte ``offset``, then ``STRATA-SHA256:`` and the whole stream's hex digest."""
        body = s.FailbackStreamSerializer(data=request.query_params)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        chunks = receiver.failback_stream(self.get_object(), v["snapshot"], v["parent"],
                                          v["offset"])
        return stream_response(request, chunks)

    @extend_schema(request=s.ReplicaSnapshotSerializer, responses=dict)
    @action(detail=True, methods=["post"])
    def rebase(self, request, name=None):
        """End of a failback: the replica takes a copy of ``snapshot`` as its newest and
        accepts forward replication again."""
        body = s.ReplicaSnapshotSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response(receiver.rebase(self.get_object(), body.validated_data["snapshot"]))


class OctetStreamParser(BaseParser):
    """The raw bytes of a chunk (bounded by Django's in-memory body limit)."""

    media_type = "application/octet-stream"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read() if stream is not None else b""


class ReplicaTransferViewSet(viewsets.ViewSet):
    """Receiving side of replication: open, append chunks, commit (apply) or discard."""

    lookup_value_regex = "[0-9a-f]+"

    @extend_schema(request=s.TransferBeginSerializer, responses={201: dict})
    def create(self, request):
        body = s.TransferBeginSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        transfer = receiver.begin_transfer(**body.validated_data)
        return Response(transfer.as_dict(), status=status.HTTP_201_CREATED)

    @extend_schema(responses=dict)
    def retrieve(self, request, pk=None):
        return Response(receiver.Transfer(pk).as_dict())

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        receiver.Transfer(pk).discard()
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request={"application/octet-stream": bytes}, responses=dict,
                   parameters=[OpenApiParameter("offset", int, required=True)])
    @action(detail=True, methods=["put"], parser_classes=[OctetStreamParser])
    def data(self, request, pk=None):
        """Append the body at ``offset`` (what the transfer holds so far)."""
        try:
            offset = int(request.query_params.get("offset", ""))
        except ValueError:
            raise ValidationError({"offset": "Give the byte offset of this chunk."})
        received = receiver.Transfer(pk).append(offset, request.data)
        return Response({"id": pk, "received": received})

    @extend_schema(request=s.TransferCommitSerializer, responses={201: dict})
    @action(detail=True, methods=["post"])
    def commit(self, request, pk=None):
        """Check the whole stream's length and SHA-256, then apply it to the replica."""
        body = s.TransferCommitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        snap = receiver.commit_transfer(receiver.Transfer(pk), size=body.validated_data["bytes"],
                                        sha256=body.validated_data["sha256"])
        return Response({"snapshot": snap.name, "replica": snap.source.name, "path": snap.path},
                        status=status.HTTP_201_CREATED)


class BackupTargetViewSet(viewsets.ModelViewSet):
    queryset = BackupTarget.objects.all()
    serializer_class = s.BackupTargetSerializer
    lookup_field = "name"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        backups.check_target(BackupTarget(**serializer.validated_data))
        serializer.save()

    def perform_update(self, serializer):
        target = serializer.save()
        backups.check_target(target)

    def perform_destroy(self, target):
        names = list(target.backups.values_list("name", flat=True))
        if names:
            raise Conflict(f"target {target.name} is used by backup(s) {', '.join(names)}.")
        names = list(target.bucket_replications.values_list("name", flat=True))
        if names:
            raise Conflict(f"target {target.name} is used by bucket replication(s) "
                           f"{', '.join(names)}.")
        target.delete()


class BackupViewSet(viewsets.ModelViewSet):
    queryset = Backup.objects.select_related("filesystem", "volume", "target")
    serializer_class = s.BackupSerializer
    lookup_field = "name"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        serializer.instance = backups.create_backup(**serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = backups.update_backup(serializer.instance,
                                                    **serializer.validated_data)

    def perform_destroy(self, backup):
        backups.delete_backup(backup)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def run(self, request, name=None):
        """Back up now (full the first time, incremental after) as a job."""
        return job_accepted(tasks.start_backup_run(self.get_object(), request.user), request)


class RestorePointViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                          mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """The catalog: every backed-up snapshot, newest first."""

    queryset = RestorePoint.objects.select_related("backup", "parent")
    serializer_class = s.RestorePointSerializer
    filterset_fields = {"backup__name": ["exact"], "kind": ["exact"]}

    def get_queryset(self):
        qs = super().get_queryset()
        if self.request.query_params.get("backup"):
            qs = qs.filter(backup__name=self.request.query_params["backup"])
        return qs

    def perform_destroy(self, rp):
        backups.delete_restore_point(rp)

    @extend_schema(request=s.RestorePointRestoreSerializer, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def restore(self, request, pk=None):
        """Restore as a new file system or volume (verified by digest), as a job."""
        rp = self.get_object()
        body = s.RestorePointRestoreSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        source = rp.backup.source
        pool = body.validated_data.get("pool") or (source.pool if source else None)
        if pool is None:
            raise ValidationError({"pool": f"{rp.kind} {rp.backup.source_name} is gone; "
                                           "give the pool to restore into."})
        job = tasks.start_restore(rp, name=body.validated_data["name"], pool=pool.name,
                                  user=request.user)
        return job_accepted(job, request)


class BucketSnapshotViewSet(viewsets.ViewSet):
    """Bucket snapshots (kept by the S3 gateway): list (``?bucket=``), take, show, delete,
    and restore into a new bucket; a snapshot is addressed as ``<bucket>/<name>``."""

    # BUCKET/NAME; a NAME of "restore" would be the restore action of BUCKET
    lookup_value_regex = r"[a-z0-9.-]+/(?!restore/)[A-Za-z0-9][A-Za-z0-9._-]*"
    serializer_class = s.BucketSnapshotSerializer

    @staticmethod
    def _split(pk: str) -> tuple[str, str]:
        bucket, _, name = pk.partition("/")
        return bucket, name

    @extend_schema(parameters=[OpenApiParameter("bucket", str)],
                   responses=s.BucketSnapshotListSerializer)
    def list(self, request):
        bucket = request.query_params.get("bucket") or None
        if bucket is not None:
            bucket_snapshots.bucket_info(bucket)  # 404 for a bucket that does not exist
        return Response({"results": bucket_snapshots.list_snapshots(bucket)})

    @extend_schema(request=s.BucketSnapshotSerializer,
                   responses={201: s.BucketSnapshotSerializer})
    def create(self, request):
        """Take a snapshot of a bucket now (the bucket needs versioning Enabled: 409)."""
        body = s.BucketSnapshotSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        bucket = body.validated_data["bucket"]
        bucket_snapshots.require_versioned(bucket)  # 400 or 409 before a name is picked
        name = body.validated_data.get("name") or bucket_snapshots.unique_name(
            bucket, "manual-", timezone.now())
        snap = bucket_snapshots.take(bucket, name)
        return Response(snap, status=status.HTTP_201_CREATED)

    @extend_schema(responses=s.BucketSnapshotSerializer)
    def retrieve(self, request, pk=None):
        return Response(bucket_snapshots.get_snapshot(*self._split(pk)))

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        bucket_snapshots.delete(*self._split(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=s.BucketRestoreSerializer, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def restore(self, request, pk=None):
        """Copy the snapshot's versions into a new bucket, as a job."""
        bucket, name = self._split(pk)
        body = s.BucketRestoreSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        target = body.validated_data["bucket"]
        bucket_snapshots.check_restore_target(bucket, name, target)
        return job_accepted(tasks.start_bucket_restore(bucket, name, target, request.user),
                            request)


class BucketReplicationViewSet(viewsets.ModelViewSet):
    queryset = BucketReplication.objects.select_related("target")
    serializer_class = s.BucketReplicationSerializer
    lookup_field = "name"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def perform_create(self, serializer):
        serializer.instance = bucket_replication.create_replication(**serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = bucket_replication.update_replication(
            serializer.instance, **serializer.validated_data)

    def perform_destroy(self, rep):
        bucket_replication.delete_replication(rep)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def sync(self, request, name=None):
        """Copy what was written since the last run now, as a job."""
        return job_accepted(tasks.start_bucket_replication_run(self.get_object(), request.user),
                            request)
