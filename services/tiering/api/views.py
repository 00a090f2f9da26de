from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, viewsets

from plane.api.responses import job_accepted
from plane.api.serializers import JobSerializer
from plane import iobudget
from services.tiering import tasks
from services.tiering.api import serializers as s
from plane.models import IOBudgetSetting
from services.tiering.models import TierMove


@extend_schema_view(**{action: extend_schema(parameters=[OpenApiParameter(
    "id", int, OpenApiParameter.PATH, enum=[1], description="The one budget: 1.")])
    for action in ("retrieve", "update", "partial_update")})
class IOBudgetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      mixins.UpdateModelMixin, viewsets.GenericViewSet):
    """The background I/O budget (one object, id 1): MB/s for the appliance and per job
    class (0 = unlimited), and the share background keeps while foreground is busy."""

    queryset = IOBudgetSetting.objects.order_by("pk")
    serializer_class = s.IOBudgetSerializer

    def get_queryset(self):
        IOBudgetSetting.get()             # made on first use: the list always holds id 1
        return super().get_queryset()

    def get_object(self):
        # there is one budget, id 1; another id is a 404 like any id that names nothing
        if self.kwargs.get("pk") != str(IOBudgetSetting.get().pk):
            raise Http404
        return IOBudgetSetting.get()

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
