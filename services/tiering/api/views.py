from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets

from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from plane import iobudget
from services.tiering import tasks
from services.tiering.api import serializers as s
from plane.models import IOBudgetSetting
from services.tiering.models import TierMove


class IOBudgetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """The background I/O budget (one object, id 1): MB/s for the appliance and per job
    class (0 = unlimited), and the share background keeps while foreground is busy."""

    queryset = IOBudgetSetting.objects.all()
    serializer_class = s.IOBudgetSerializer

    def get_object(self):
        return IOBudgetSetting.get()

    def list(self, request, *args, **kwargs):
        return self.retrieve(request, *args, **kwargs)

    def perform_update(self, serializer):
        serializer.save()
        iobudget.forget_cached()


class TierMoveViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      viewsets.GenericViewSet):
    """Moves of file systems and volumes between pools (they keep their names)."""

    queryset = TierMove.objects.all()
    serializer_class = s.TierMoveSerializer
    filterset_fields = ["kind", "name", "state"]

    @extend_schema(request=s.TierMoveRequestSerializer, responses={202: JobSerializer})
    def create(self, request):
        body = s.TierMoveRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        obj = body.validated_data.get("filesystem") or body.validated_data.get("volume")
        record = tasks.start_move(obj, body.validated_data["pool"], request.user)
        return job_accepted(record.job, request)
