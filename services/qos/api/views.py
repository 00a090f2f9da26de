from rest_framework import mixins, viewsets
from rest_framework.response import Response

from services.qos import service
from services.qos.api.serializers import WorkClassSerializer
from services.qos.models import WorkClass


class WorkClassViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                       mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """Classes of work (samples, checkpoints, background) and their shares; a change is
    applied at once to the daemons' cgroups, the S3 gateway's admission queue and the
    background I/O budget."""

    queryset = WorkClass.objects.all()
    serializer_class = WorkClassSerializer
    lookup_value_regex = r"[a-z]+"

    def get_queryset(self):
        WorkClass.ensure()
        return super().get_queryset()

    def list(self, request, *args, **kwargs):
        self.get_queryset()
        return Response([WorkClassSerializer(row).data for row in service.rows()])

    def retrieve(self, request, *args, **kwargs):
        self.get_object()
        return Response(self._row(kwargs["pk"]))

    def update(self, request, *args, **kwargs):
        kwargs["partial"] = True     # the share is the one thing to change
        super().update(request, *args, **kwargs)
        return Response(self._row(kwargs["pk"]))

    @staticmethod
    def _row(name: str) -> dict:
        return WorkClassSerializer(next(r for r in service.rows() if r["name"] == name)).data
