from drf_spectacular.utils import extend_schema
from django.shortcuts import get_object_or_404
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from plane.jobs import start_job
from services.storage import cephkeys, service, tasks
from services.storage.api import serializers as s
from services.storage.models import CephClientKey, FileSystem, Pool, Snapshot, Volume


class PoolViewSet(viewsets.ModelViewSet):
    queryset = Pool.objects.all()
    serializer_class = s.PoolSerializer
    lookup_field = "name"
    filterset_fields = ["media", "state", "driver"]
    http_method_names = ["get", "post", "delete", "head", "options"]

    def perform_create(self, serializer):
        serializer.instance = service.create_pool(**serializer.validated_data)

    def perform_destroy(self, pool):
        service.delete_pool(pool)

    def retrieve(self, request, *args, **kwargs):
        pool = service.refresh_pool(self.get_object())
        return Response(self.get_serializer(pool).data)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def scrub(self, request, name=None):
        pool = self.get_object()
        job = start_job("scrub", tasks.scrub_pool, user=request.user,
                        target=("pool", pool.name), params={"pool": pool.name})
        return job_accepted(job, request)


class FileSystemViewSet(viewsets.ModelViewSet):
    queryset = FileSystem.objects.select_related("pool", "origin")
    serializer_class = s.FileSystemSerializer
    lookup_field = "name"
    filterset_fields = ["pool__name", "state", "kept_by"]

    def perform_create(self, serializer):
        serializer.instance = service.create_filesystem(**serializer.validated_data)

    def perform_update(self, serializer):
        fs, asked = serializer.instance, serializer.validated_data
        # a PUT of what a GET answered changes nothing (not even on a kept file system)
        changes = {k: v for k, v in asked.items() if getattr(fs, k) != v}
        if "quota_bytes" in changes:
            service.set_filesystem_quota(fs, changes["quota_bytes"])
        access = {k: changes[k] for k in ("owner", "group", "mode") if k in changes}
        if access:
            service.set_filesystem_access(fs, **access)

    def perform_destroy(self, fs):
        service.delete_filesystem(fs)

    @extend_schema(request=s.CephKeySerializer, responses={200: s.CephKeySerializer(many=True),
                                                           201: s.CephKeySerializer})
    @action(detail=True, methods=["get", "post"], url_path="ceph-keys",
            serializer_class=s.CephKeySerializer)
    def ceph_keys(self, request, name=None):
        """Native CephFS keys of the file system (ceph pools only: 409 no_native_access
        elsewhere). POST makes one; its secret is in the answer (``secret``,
        ``show_once``) and never again."""
        fs = self.get_object()
        if request.method == "GET":
            keys = fs.ceph_keys.all()
            return Response(s.CephKeySerializer(keys, many=True).data)
        body = s.CephKeySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        key, secret = cephkeys.create_key(fs, body.validated_data["name"],
                                          body.validated_data.get("read_only", False))
        data = s.CephKeySerializer(key).data
        data["secret"] = secret
        data["show_once"] = {"entity": key.entity, "secret": secret}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    @action(detail=True, methods=["delete"], url_path=r"ceph-keys/(?P<key>[a-z0-9][a-z0-9._-]{0,62})")
    def revoke_ceph_key(self, request, name=None, key=None):
        """Revoke a key: removed from Ceph, its mounted clients evicted."""
        fs = self.get_object()
        row = get_object_or_404(CephClientKey, filesystem=fs, name=key)
        cephkeys.revoke_key(row)
        return Response(status=status.HTTP_204_NO_CONTENT)


class VolumeViewSet(viewsets.ModelViewSet):
    queryset = Volume.objects.select_related("pool", "origin")
    serializer_class = s.VolumeSerializer
    lookup_field = "name"
    filterset_fields = ["pool__name", "state"]
    http_method_names = ["get", "post", "delete", "head", "options"]

    def perform_create(self, serializer):
        serializer.instance = service.create_volume(**serializer.validated_data)

    def perform_destroy(self, vol):
        service.delete_volume(vol)

    @extend_schema(request=s.ResizeSerializer, responses=s.VolumeSerializer)
    @action(detail=True, methods=["post"])
    def resize(self, request, name=None):
        vol = self.get_object()
        body = s.ResizeSerializer(data=request.data, context={"volume": vol})
        body.is_valid(raise_exception=True)
        vol = service.resize_volume(vol, body.validated_data["size_bytes"])
        return Response(self.get_serializer(vol).data)


class SnapshotViewSet(viewsets.ModelViewSet):
    queryset = Snapshot.objects.select_related("filesystem__pool", "volume__pool")
    serializer_class = s.SnapshotSerializer
    filterset_fields = {"filesystem__name": ["exact"], "volume__name": ["exact"]}
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_queryset(self):
        qs = super().get_queryset()
        params = self.request.query_params
        if params.get("filesystem"):
            qs = qs.filter(filesystem__name=params["filesystem"])
        if params.get("volume"):
            qs = qs.filter(volume__name=params["volume"])
        return qs

    def perform_create(self, serializer):
        serializer.instance = service.create_snapshot(**serializer.validated_data)

    def perform_destroy(self, snap):
        service.delete_snapshot(snap)

    @extend_schema(request=s.CloneSerializer, responses={201: dict})
    @action(detail=True, methods=["post"])
    def clone(self, request, pk=None):
        snap = self.get_object()
        body = s.CloneSerializer(data=request.data, context={"snapshot": snap})
        body.is_valid(raise_exception=True)
        obj = service.clone_snapshot(snap, **body.validated_data)
        ser = s.FileSystemSerializer if snap.filesystem_id else s.VolumeSerializer
        return Response(ser(obj).data, status=status.HTTP_201_CREATED)
