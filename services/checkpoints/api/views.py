from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from plane import iobudget
from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from plumbing.errors import Conflict
from services.checkpoints import prewarm, retention, scanner, service, tasks, tierdown
from services.checkpoints.api import serializers as s
from services.checkpoints.entries import MAX_RANKS, rank_entries
from services.checkpoints.models import (
    CheckpointJob,
    CheckpointLease,
    CheckpointVersion,
)


RANK_COUNT = {"type": "integer", "minimum": 1, "maximum": MAX_RANKS}


class CheckpointJobViewSet(viewsets.ModelViewSet):
    """Training jobs whose checkpoints Strata keeps (looked up by name)."""

    queryset = CheckpointJob.objects.select_related("filesystem", "capacity_pool", "latest")
    serializer_class = s.CheckpointJobSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9][a-z0-9._-]{0,62}"
    filterset_fields = ["tenant"]

    def perform_create(self, serializer):
        serializer.instance = service.create_job(**serializer.validated_data)

    def perform_destroy(self, job):
        service.delete_job(job)

    @extend_schema(responses=s.VersionBriefSerializer)
    @action(detail=True, methods=["get"])
    def latest(self, request, name=None):
        """The newest committed version (`id`, `step`, `state`, where to read it)."""
        version = service.latest_version(self.get_object())
        if version is None:
            return Response({"error": "not_found",
                             "detail": f"Checkpoint job {name} has no committed version."},
                            status=status.HTTP_404_NOT_FOUND)
        return Response(s.VersionBriefSerializer(version).data)

    @extend_schema(
        responses={200: dict, 409: OpenApiResponse(
            description="The job's file system is not exported over NFS, or no node is up.")},
        parameters=[OpenApiParameter("ranks", RANK_COUNT, required=True,
                                     description="how many ranks write"),
                    OpenApiParameter("group_size", RANK_COUNT,
                                     description="ranks per group (default 1)")])
    @action(detail=True, methods=["get"])
    def entries(self, request, name=None):
        """The NFS entry each rank writes through: rank r uses
        entries[(r // group_size) % len(entries)] (`rank_entry`: the index per rank)."""
        return Response(rank_entries(self.get_object(), request.query_params.get("ranks"),
                                     request.query_params.get("group_size")))

    @extend_schema(responses={200: dict})
    @action(detail=True, methods=["get"], url_path="retention-preview")
    def retention_preview(self, request, name=None):
        """What retention would delete now, and why every other version stays."""
        return Response(retention.plan(self.get_object()))

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"])
    def retention(self, request, name=None):
        """Apply retention now, as a job with progress."""
        job = tasks.start_retention(self.get_object(), user=request.user)
        return job_accepted(job, request)

    @extend_schema(request=None, responses={200: dict})
    @action(detail=True, methods=["post"])
    def scan(self, request, name=None):
        """Detect and commit DCP/Orbax checkpoints written without the API, now."""
        return Response(scanner.scan_job(self.get_object()))


class CheckpointVersionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                               viewsets.GenericViewSet):
    """A job's versions: `POST` with a `step` begins one; actions commit, lease, pin."""

    serializer_class = s.CheckpointVersionSerializer
    filterset_fields = ["state", "tier", "step"]

    def get_serializer_class(self):
        return s.CheckpointVersionListSerializer if self.action == "list" else super(
        ).get_serializer_class()

    def get_job(self) -> CheckpointJob:
        return get_object_or_404(CheckpointJob, name=self.kwargs["job_name"])

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if self.action in ("create", "commit", "lease"):  # a save or a restore is under way:
            iobudget.foreground()                            # background work yields

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no URL kwargs
            return CheckpointVersion.objects.none()
        return CheckpointVersion.objects.filter(
            job__name=self.kwargs["job_name"]).select_related("job__filesystem")

    @extend_schema(request=s.BeginSerializer, responses={201: s.CheckpointVersionSerializer})
    def create(self, request, job_name=None):
        body = s.BeginSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version, created = service.begin_version(self.get_job(), body.validated_data["step"])
        return Response(self.get_serializer(version).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=s.CommitSerializer, responses=s.CheckpointVersionSerializer)
    @action(detail=True, methods=["post"])
    def commit(self, request, job_name=None, pk=None):
        """Verify every shard of the manifest, then commit and move the job's latest; 409
        `{"error": "incomplete", "shards": [...]}` naming every bad shard (nothing changes)."""
        version = self.get_object()
        body = s.CommitSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = service.commit_version(version, body.validated_data["manifest"],
                                         location=body.validated_data["location"])
        return Response(self.get_serializer(version).data)

    @extend_schema(request=None, responses=s.CheckpointVersionSerializer)
    @action(detail=True, methods=["post"])
    def abort(self, request, job_name=None, pk=None):
        """Give up a version being written (its files go at the next retention)."""
        version = self.get_object()
        if not service.abort_version(version):
            version.refresh_from_db()
            if version.state != CheckpointVersion.State.ABORTED:
                raise Conflict(f"Version {version} is {version.state}; "
                                       "only a writing version can be aborted.")
        version.refresh_from_db()
        return Response(self.get_serializer(version).data)

    @extend_schema(request=s.LeaseRequestSerializer, responses={201: s.LeaseSerializer})
    @action(detail=True, methods=["post"])
    def lease(self, request, job_name=None, pk=None):
        """Hold a version for a restore; a cold version starts pre-warming (see `prewarm_job`)."""
        body = s.LeaseRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        lease, job = service.take_lease(self.get_object(), user=request.user,
                                        **body.validated_data)
        data = s.LeaseSerializer(lease).data
        data["prewarm_job"] = (JobSerializer(job, context={"request": request}).data["url"]
                               if job else None)
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.PinSerializer, responses=s.CheckpointVersionSerializer)
    @action(detail=True, methods=["post"])
    def pin(self, request, job_name=None, pk=None):
        body = s.PinSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        version = service.set_pin(self.get_object(), True, body.validated_data["reason"])
        return Response(self.get_serializer(version).data)

    @extend_schema(request=None, responses=s.CheckpointVersionSerializer)
    @action(detail=True, methods=["post"])
    def unpin(self, request, job_name=None, pk=None):
        version = service.set_pin(self.get_object(), False)
        return Response(self.get_serializer(version).data)

    @extend_schema(request=None, responses={200: s.CheckpointVersionSerializer,
                                            202: JobSerializer})
    @action(detail=True, methods=["post"])
    def prewarm(self, request, job_name=None, pk=None):
        """Bring a cold version back to the hot pool (202 with a job); hot: nothing to do."""
        version = self.get_object()
        job = prewarm.request_prewarm(version, user=request.user)
        if job is not None:
            return job_accepted(job, request)
        version.refresh_from_db()
        return Response(self.get_serializer(version).data)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=True, methods=["post"], url_path="tier-down")
    def tier_down(self, request, job_name=None, pk=None):
        """Move a superseded version to the job's capacity pool now, whatever `tier_after`
        says (202 with the job); 409 says why a version cannot move (latest, leased,
        writing, aborted, already cold), 400 when the job has no capacity pool."""
        job = tierdown.request_tier_down(self.get_object(), user=request.user)
        return job_accepted(job, request)


class CheckpointLeaseViewSet(mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
                             viewsets.GenericViewSet):
    """Leases: `DELETE` releases one, `POST .../renew/` extends it."""

    queryset = CheckpointLease.objects.select_related("version")
    serializer_class = s.LeaseSerializer

    def perform_destroy(self, lease):
        service.release_lease(lease)

    @extend_schema(request=s.LeaseRequestSerializer, responses=s.LeaseSerializer)
    @action(detail=True, methods=["post"])
    def renew(self, request, pk=None):
        body = s.LeaseRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        lease = service.renew_lease(self.get_object(), body.validated_data["ttl_seconds"])
        return Response(self.get_serializer(lease).data)
