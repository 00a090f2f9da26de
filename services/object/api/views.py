from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from services.object import kms, service, tasks
from services.object.api import serializers as s
from services.object.models import Bucket, Gateway, KmsKey, S3Key


ERROR_RESPONSE = OpenApiResponse(
    response=inline_serializer("GatewayDown", {"error": serializers.CharField(), "detail": serializers.CharField()}),
    description="The S3 gateway is not running.")


class BucketViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                    mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """S3 buckets; what the gateway holds (usage, buckets made over S3) is refreshed on read.
    Changes are PATCHes (a PUT is only for the policy and CORS sub-resources)."""

    queryset = Bucket.objects.select_related("filesystem", "filesystem__pool")
    serializer_class = s.BucketSerializer
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9.-]+"
    filterset_fields = ["owner", "versioning"]
    http_method_names = ["get", "post", "put", "patch", "delete", "head", "options"]

    def partial_update(self, request, *args, **kwargs):
        return mixins.UpdateModelMixin.update(self, request, *args, partial=True, **kwargs)

    def list(self, request, *args, **kwargs):
        service.sync_for_listing()
        return super().list(request, *args, **kwargs)

    def get_serializer_class(self):
        return s.BucketDetailSerializer if self.action == "retrieve" else s.BucketSerializer

    def retrieve(self, request, *args, **kwargs):
        bucket = self.get_object()
        service.refresh_usage([bucket])
        access = service.bucket_access(bucket)
        bucket.policy, bucket.cors = access["policy"], access["cors"]
        return Response(self.get_serializer(bucket).data)

    @extend_schema(methods=["GET"], responses={200: s.BucketPolicySerializer, 503: ERROR_RESPONSE})
    @extend_schema(methods=["PUT"], request=s.BucketPolicySerializer, responses={200: s.BucketPolicySerializer})
    @extend_schema(methods=["DELETE"], responses={204: None})
    @action(detail=True, methods=["get", "put", "delete"])
    def policy(self, request, name=None):
        """The bucket policy (S3 PutBucketPolicy's document and validation)."""
        bucket = self.get_object()
        if request.method == "GET":
            return Response({"policy": service.get_bucket_policy(bucket)})
        if request.method == "DELETE":
            service.set_bucket_policy(bucket, None)
            return Response(status=status.HTTP_204_NO_CONTENT)
        body = s.BucketPolicySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response({"policy": service.set_bucket_policy(bucket, body.validated_data["policy"])})

    @extend_schema(methods=["GET"], responses={200: s.BucketCorsSerializer, 503: ERROR_RESPONSE})
    @extend_schema(methods=["PUT"], request=s.BucketCorsSerializer, responses={200: s.BucketCorsSerializer})
    @extend_schema(methods=["DELETE"], responses={204: None})
    @action(detail=True, methods=["get", "put", "delete"])
    def cors(self, request, name=None):
        """The bucket's CORS rules (S3 PutBucketCors's rules and validation)."""
        bucket = self.get_object()
        if request.method == "GET":
            return Response({"rules": service.get_bucket_cors(bucket)})
        if request.method == "DELETE":
            service.set_bucket_cors(bucket, None)
            return Response(status=status.HTTP_204_NO_CONTENT)
        body = s.BucketCorsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        return Response({"rules": service.set_bucket_cors(bucket, body.validated_data["rules"])})

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


class KmsKeyViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin,
                    mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """SSE-KMS keys kept by the appliance (ids for ``x-amz-server-side-encryption-aws-kms-key-id``
    and bucket default encryption). A disabled key refuses new objects and reads of its objects
    (S3 answers 400 KMS.DisabledException) until enabled again. Keys are never deleted: their
    objects would be unreadable for good. The detail takes the key id or its alias's NAME
    (``/kms-keys/NAME/`` for ``alias/NAME``). A change of alias reaches the gateway at once."""

    queryset = KmsKey.objects.select_related("created_by")
    serializer_class = s.KmsKeySerializer
    lookup_field = "key_id"
    lookup_value_regex = r"[^/]+"
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_object(self):
        key = kms.find_kms_key(self.kwargs["key_id"])
        self.check_object_permissions(self.request, key)
        return key

    def get_serializer_context(self):
        context = super().get_serializer_context()
        gw = Gateway.objects.first()
        context["region"] = gw.region if gw else "us-east-1"
        return context

    def perform_create(self, serializer):
        serializer.instance = kms.create_kms_key(created_by=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = kms.update_kms_key(serializer.instance, serializer.validated_data)

    @extend_schema(request=None, responses={200: s.KmsKeySerializer})
    @action(detail=True, methods=["post"])
    def enable(self, request, key_id=None):
        """EnableKey: objects under this key can be written and read again."""
        return Response(self.get_serializer(kms.set_kms_key_enabled(self.get_object(), True)).data)

    @extend_schema(request=None, responses={200: s.KmsKeySerializer})
    @action(detail=True, methods=["post"])
    def disable(self, request, key_id=None):
        """DisableKey: new objects under this key and reads of its objects are refused."""
        return Response(self.get_serializer(kms.set_kms_key_enabled(self.get_object(), False)).data)
