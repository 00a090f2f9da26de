from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action

from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from plane.jobs import start_job
from services.file import service, tasks
from services.file.api import serializers as s
from services.file.models import NfsExport, SmbShare, SmbUser


class NfsExportViewSet(viewsets.ModelViewSet):
    """NFSv4 exports. A change the daemon refuses is kept with state error (422/503)."""

    queryset = NfsExport.objects.select_related("filesystem")
    serializer_class = s.NfsExportSerializer
    filterset_fields = ["state"]

    def perform_create(self, serializer):
        serializer.instance = service.save_export(NfsExport(**serializer.validated_data))

    def perform_update(self, serializer):
        exp = serializer.instance
        for key, value in serializer.validated_data.items():
            setattr(exp, key, value)
        serializer.instance = service.save_export(exp)

    def perform_destroy(self, exp):
        service.delete_export(exp)

    @extend_schema(request=None, responses={202: JobSerializer})
    @action(detail=False, methods=["post"])
    def reconcile(self, request):
        """Re-apply every export, share and SMB user (a job run by the worker)."""
        job = start_job("file.reconcile", tasks.reconcile, user=request.user,
                        target=("file", "all"))
        return job_accepted(job, request)


class SmbShareViewSet(viewsets.ModelViewSet):
    """SMB3 shares. A change the daemon refuses is kept with state error (422/503)."""

    queryset = SmbShare.objects.select_related("filesystem")
    serializer_class = s.SmbShareSerializer
    lookup_field = "name"
    filterset_fields = ["state"]

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        if data.pop("grant_access", False):
            service.grant_share_access(data["filesystem"], data["path"], data["valid_users"])
        serializer.instance = service.save_share(SmbShare(**data))

    def perform_update(self, serializer):
        share = serializer.instance
        data = dict(serializer.validated_data)
        grant = data.pop("grant_access", False)
        for key, value in data.items():
            setattr(share, key, value)
        if grant:
            service.grant_share_access(share.filesystem, share.path, share.valid_users)
        serializer.instance = service.save_share(share)

    def perform_destroy(self, share):
        service.delete_share(share)


class SmbUserViewSet(viewsets.ModelViewSet):
    """SMB users (a Unix account each, kept by Strata); PATCH changes the password."""

    queryset = SmbUser.objects.all()
    serializer_class = s.SmbUserSerializer
    lookup_field = "username"

    def perform_create(self, serializer):
        data = serializer.validated_data
        serializer.instance = service.create_smb_user(data["username"], data["password"])

    def perform_update(self, serializer):
        if "password" in serializer.validated_data:
            serializer.instance = service.set_smb_user_password(
                serializer.instance, serializer.validated_data["password"])

    def perform_destroy(self, user):
        service.delete_smb_user(user)
