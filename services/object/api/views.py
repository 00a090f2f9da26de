from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.response import Response

from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from services.object import service, tasks
from services.object.api import serializers as s
from services.object.models import Bucket, S3Key


class BucketViewSet(viewsets.ModelViewSet):
    """S3 buckets; what the gateway holds (usage, buckets made over S3) is refreshed on read."""

    queryset = Bucket.objects.select_related("filesystem", "filesystem__pool")
    serializer_class = s.BucketSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9.-]+"
    filterset_fields = ["owner", "versioning"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def list(self, request, *args, **kwargs):
        service.sync_for_listing()
        return super().list(request, *args, **kwargs)

    def retrieve(self, request, *args, **kwargs):
        bucket = self.get_object()
        service.refresh_usage([bucket])
        return Response(self.get_serializer(bucket).data)

    def perform_create(self, serializer):
        serializer.instance = service.create_bucket(**serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = service.update_bucket(serializer.instance, serializer.validated_data)

    def perform_destroy(self, bucket):
        service.delete_bucket(bucket)


class S3KeyViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                   mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """S3 access keys. Create answers the secret once; nothing else ever shows it."""

    queryset = S3Key.objects.select_related("created_by")
    serializer_class = s.S3KeySerializer
    lookup_field = "access_key"
    filterset_fields = ["user", "admin"]

    def get_serializer_class(self):
        return s.S3KeyCreateSerializer if self.action == "create" else s.S3KeySerializer

    @extend_schema(responses={201: inline_serializer("S3KeyCreated", {
        "access_key": serializers.CharField(), "secret_key": serializers.CharField(),
        "user": serializers.CharField(), "admin": serializers.BooleanField(),
        "endpoint": serializers.CharField()})})
    def create(self, request, *args, **kwargs):
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        key, secret = service.create_key(created_by=request.user, **body.validated_data)
        endpoint = service.public_endpoint()
        data = dict(s.S3KeySerializer(key).data, secret_key=secret, endpoint=endpoint)
        # what a client must show now because no later answer carries it (see the report /
        # console proposal: the generic create form can display this block before reloading)
        data["show_once"] = {"access_key": key.access_key, "secret_key": secret, "endpoint": endpoint}
        return Response(data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, key):
        service.delete_key(key)


class LifecycleRunViewSet(viewsets.ViewSet):
    """Run the buckets' lifecycle rules now (beat runs them every hour): a Job whose result
    counts what expired and what moved to the capacity tier."""

    @extend_schema(request=None, responses={202: JobSerializer})
    def create(self, request):
        return job_accepted(tasks.start_lifecycle_pass(request.user), request)
