"""REST for vector collections: thin views over `vector.service`.

Engine errors (`vector.engine.VectorError`) are domain errors: the API's one handler
(`plane/errors.py`) answers them as JSON `{"error", "detail"}` with their kind's status.
"""
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission
from rest_framework.response import Response

from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from plane.roles import ADMIN, role_of
from vector import service
from vector.api import serializers as s
from vector.models import VectorCollection, VectorSnapshot


class AnyRole(BasePermission):
    """Searches are reads sent as POST: every signed-in role may run them."""

    message = "Sign in to search."

    def has_permission(self, request, view):
        return role_of(request.user) is not None


class VectorCollectionViewSet(viewsets.ModelViewSet):
    """Vector collections: definition, vectors (upsert/get/delete), search, builds, snapshots."""

    queryset = VectorCollection.objects.select_related("pool", "filesystem")
    serializer_class = s.VectorCollectionSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9_-]*"
    filterset_fields = ["pool__name", "index_type", "metric"]
    http_method_names = ["get", "post", "delete", "head", "options"]

    def get_permissions(self):
        if self.action == "search":
            return [AnyRole()]
        return super().get_permissions()

    # -- collections -------------------------------------------------------------------
    def perform_create(self, serializer):
        serializer.instance = service.create_collection(**serializer.validated_data)

    def perform_destroy(self, row):
        service.delete_collection(row)

    def retrieve(self, request, *args, **kwargs):
        row = self.get_object()
        stats = service.stats(row)   # also records count and memory on the row
        return Response({**self.get_serializer(row).data, "stats": stats})

    def list(self, request, *args, **kwargs):
        for row in self.filter_queryset(self.get_queryset()):
            service.refresh_if_open(row)
        return super().list(request, *args, **kwargs)

    @extend_schema(request=s.ImportSerializer, responses={201: s.VectorCollectionSerializer})
    @action(detail=False, methods=["post"], url_path="import")
    def import_(self, request):
        """Admins: a new collection copied from an engine snapshot directory on the server."""
        if role_of(request.user) != ADMIN:
            raise exceptions.PermissionDenied("Only admins may import from server paths.")
        body = s.ImportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = service.import_collection(**body.validated_data)
        return Response(self.get_serializer(row).data, status=status.HTTP_201_CREATED)

    # -- vectors -----------------------------------------------------------------------
    @extend_schema(request=s.UpsertSerializer, responses={200: dict})
    @action(detail=True, methods=["post"])
    def vectors(self, request, name=None):
        """Upsert a batch `vectors: [{id, values, metadata}]` (or the compact form `ids`,
        `vectors_b64`: base64 little-endian float32 rows, `metadata`: a list); answered after
        the WAL fsync."""
        row = self.get_object()
        body = request.data
        if isinstance(body, dict) and "vectors_b64" in body:
            count = service.upsert_arrays(row, body)
        elif not isinstance(body, dict) or "vectors" not in body:
            raise exceptions.ValidationError({"vectors": "A list of {id, values, metadata}."})
        else:
            count = service.upsert(row, body["vectors"])
        return Response({"upserted": count, "count": row.vector_count})

    @extend_schema(request=None, responses={200: dict})
    @action(detail=True, methods=["get", "delete"], url_path=r"vectors/(?P<vid>[^/]+)")
    def vector(self, request, name=None, vid=None):
        """GET one vector {id, values, metadata}; DELETE it."""
        row = self.get_object()
        if request.method == "DELETE":
            service.delete_vector(row, vid)
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(service.get_vector(row, vid))

    @extend_schema(request=s.DeleteVectorsSerializer, responses={200: dict})
    @action(detail=True, methods=["post"], url_path="delete-vectors")
    def delete_vectors(self, request, name=None):
        """Delete `ids: [...]` (unknown ids are ignored); answered after the WAL fsync."""
        row = self.get_object()
        if not isinstance(request.data, dict) or "ids" not in request.data:
            raise exceptions.ValidationError({"ids": "A list of vector ids."})
        return Response({"deleted": service.delete_vectors(row, request.data["ids"])})

    @extend_schema(request=s.SearchSerializer, responses={200: dict})
    @action(detail=True, methods=["post"])
    def search(self, request, name=None):
        """Top-k for `vector` (or each of `vectors`): `results: [{id, score, metadata}]`."""
        return Response(service.search(self.get_object(), request.data))

    # -- index builds (Jobs) -----------------------------------------------------------
    def _build(self, request, kind):
        row = self.get_object()
        job = service.start_build(row, user=request.user, kind=kind)
        return job_accepted(job, request)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def build(self, request, name=None):
        """Train (IVF/PQ) or rebuild the index as a Job; searches use the old index meanwhile."""
        return self._build(request, "build")

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def train(self, request, name=None):
        """Same as build (the name used for IVF/PQ collections)."""
        return self._build(request, "train")

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def rebuild(self, request, name=None):
        """Same as build (HNSW: reclaims deleted graph nodes)."""
        return self._build(request, "rebuild")

    # -- snapshots ---------------------------------------------------------------------
    @extend_schema(methods=["GET"], responses=s.VectorSnapshotSerializer(many=True))
    @extend_schema(methods=["POST"], request=s.VectorSnapshotSerializer,
                   responses={201: s.VectorSnapshotSerializer})
    @action(detail=True, methods=["get", "post"], pagination_class=None, filter_backends=[])
    def snapshots(self, request, name=None):
        """List the collection's snapshots, or take one (`name`)."""
        row = self.get_object()
        if request.method == "GET":
            data = s.VectorSnapshotSerializer(row.snapshots.all(), many=True).data
            return Response(data)
        body = s.VectorSnapshotSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        snap = service.create_snapshot(row, body.validated_data["name"])
        return Response(s.VectorSnapshotSerializer(snap).data, status=status.HTTP_201_CREATED)

    def _snapshot(self, snap):
        row = self.get_object()
        found = VectorSnapshot.objects.filter(collection=row, name=snap).first()
        if found is None:
            raise exceptions.NotFound(f"Collection {row.name} has no snapshot named {snap}.")
        return found

    @extend_schema(methods=["DELETE"], request=None, responses={204: None})
    @extend_schema(methods=["GET"], operation_id="api_v1_vector_collections_snapshot_retrieve",
                   responses=s.VectorSnapshotSerializer)
    @action(detail=True, methods=["get", "delete"], url_path=r"snapshots/(?P<snap>[^/]+)")
    def snapshot(self, request, name=None, snap=None):
        """GET or DELETE one snapshot."""
        found = self._snapshot(snap)
        if request.method == "DELETE":
            service.delete_snapshot(found)
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(s.VectorSnapshotSerializer(found).data)

    @extend_schema(request=s.RestoreSerializer, responses={201: s.VectorCollectionSerializer})
    @action(detail=True, methods=["post"], url_path=r"snapshots/(?P<snap>[^/]+)/restore")
    def restore(self, request, name=None, snap=None):
        """A new collection (`name`, optional `pool`) with the snapshot's contents."""
        found = self._snapshot(snap)
        body = s.RestoreSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = service.restore_snapshot(found, **body.validated_data)
        return Response(s.VectorCollectionSerializer(row).data, status=status.HTTP_201_CREATED)
