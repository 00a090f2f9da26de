from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from services.block import service
from services.block.api import serializers as s
from services.block.models import BlockExport, Host, HostGroup


class HostViewSet(viewsets.ModelViewSet):
    """Client machines: iSCSI initiator IQN, NVMe host NQN, address, CHAP login."""

    queryset = Host.objects.prefetch_related("groups")
    serializer_class = s.HostSerializer
    lookup_field = "name"

    def perform_create(self, serializer):
        serializer.instance = service.save_host(Host(), dict(serializer.validated_data))

    def perform_update(self, serializer):
        service.save_host(serializer.instance, dict(serializer.validated_data))

    def perform_destroy(self, host):
        service.delete_host(host)


class HostGroupViewSet(viewsets.ModelViewSet):
    """Hosts that see the same LUNs (one iSCSI target per group)."""

    queryset = HostGroup.objects.prefetch_related("hosts")
    serializer_class = s.HostGroupSerializer
    lookup_field = "name"

    def perform_create(self, serializer):
        serializer.instance = service.save_host_group(HostGroup(),
                                                      dict(serializer.validated_data))

    def perform_update(self, serializer):
        service.save_host_group(serializer.instance, dict(serializer.validated_data))

    def perform_destroy(self, group):
        service.delete_host_group(group)


class BlockExportViewSet(viewsets.ModelViewSet):
    """Volumes exported over iscsi, nbd, vhost-user-blk or nvmf; QoS changes live by PATCH."""

    queryset = BlockExport.objects.select_related("volume__pool", "host_group")
    serializer_class = s.BlockExportSerializer
    filterset_fields = ["protocol", "state"]

    def get_queryset(self):
        qs = super().get_queryset()
        if self.request.query_params.get("volume"):
            qs = qs.filter(volume__name=self.request.query_params["volume"])
        return qs

    def perform_create(self, serializer):
        serializer.instance = service.create_export(**serializer.validated_data)

    def perform_update(self, serializer):
        service.update_export(serializer.instance, dict(serializer.validated_data))

    def perform_destroy(self, export):
        service.delete_export(export)

    @extend_schema(parameters=[s.AttachQuerySerializer], responses=s.AttachRecipeSerializer)
    @action(detail=True, methods=["get"])
    def attach(self, request, pk=None):
        """How a VM attaches this export: a libvirt <disk> and <domain>, QEMU arguments, and
        the CHAP secret's libvirt definition (never the secret itself)."""
        query = s.AttachQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        options = dict(query.validated_data)
        return Response(service.attach_recipe(self.get_object(), options.pop("host", None),
                                              **options))
