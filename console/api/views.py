import socket

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, viewsets
from rest_framework.decorators import (action, api_view, authentication_classes,
                                       permission_classes)
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response

from console.daemons import read_states, worker_name
from plane.api.serializers import (AuditEventSerializer, JobSerializer, MeSerializer,
                                   TokenSerializer, UserSerializer, last_admin,
                                   lock_admins)
from plane.celery import app as celery_app
from plane.discovery import service_modules
from plane.jobs import cancel_job
from plane import tokens
from plane.models import ApiToken, AuditEvent, Job
from plane.roles import role_of
from plumbing.errors import Conflict


class JobViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Job.objects.select_related("user")
    serializer_class = JobSerializer
    filterset_fields = ["state", "kind", "target_type", "target_name"]

    @extend_schema(request=None, responses=JobSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = cancel_job(self.get_object())
        return Response(self.get_serializer(job).data)


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    filterset_fields = ["username", "method", "result"]


class UserViewSet(viewsets.ModelViewSet):
    queryset = User.objects.prefetch_related("groups").order_by("id")
    serializer_class = UserSerializer
    lookup_field = "username"
    admin_only = True

    def perform_destroy(self, instance):
        if instance == self.request.user:
            raise Conflict("You cannot delete your own account; another admin can.")
        with transaction.atomic():
            lock_admins()
            if role_of(instance) == "admin" and last_admin(instance):
                raise Conflict(f"{instance.username} is the last active admin; make another "
                               "user admin first.")
            instance.delete()


@extend_schema_view(destroy=extend_schema(parameters=[OpenApiParameter(
    "username", str, OpenApiParameter.PATH, description="Whose token to revoke.")]))
class TokenViewSet(mixins.ListModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """API tokens: every user lists, creates (replacing it) and revokes its own; admins see
    and revoke everyone's. A revoked token answers 401 at once."""

    serializer_class = TokenSerializer
    permission_classes = [IsAuthenticated]
    lookup_field = "user__username"
    lookup_url_kwarg = "username"
    filter_backends = []

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no request user
            return ApiToken.objects.none()
        mine = ApiToken.objects.select_related("user").order_by("user__username")
        return mine if role_of(self.request.user) == "admin" else mine.filter(
            user=self.request.user)

    @extend_schema(request=None, responses={201: TokenSerializer})
    def create(self, request):
        """A new token for the caller (its old one stops working); the key is shown once:
        the plane keeps only its digest."""
        key = tokens.issue(request.user)
        return Response(TokenSerializer(request.user.api_token, context={"key": key}).data,
                        status=201)


class MeViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Who am I: username and role of the caller (one object, not a page of users)."""

    queryset = User.objects.none()
    serializer_class = MeSerializer
    pagination_class = None
    filter_backends = []

    def list(self, request):
        return Response(MeSerializer(
            {"username": request.user.get_username(), "role": role_of(request.user)}).data)


def _check_database() -> dict:
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
        return {"state": "ok", "engine": connection.vendor}
    except Exception as exc:
        return {"state": "error", "detail": str(exc)}


def _check_broker() -> dict:
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return {"state": "ok"}
    except Exception as exc:
        return {"state": "error", "detail": str(exc)}


def _check_worker() -> dict:
    options = settings.SERVICE_OPTIONS
    # under `strata up` one worker is known by name: done once it answers; otherwise wait
    # the whole second for every worker of the broker to answer
    ours = {"destination": [worker_name(options["port"])], "limit": 1} \
        if options.get("supervised") else {}
    try:
        replies = celery_app.control.ping(timeout=1.0, **ours)
    except Exception as exc:
        return {"state": "error", "detail": str(exc)}
    if not replies:
        return {"state": "error", "detail": "no Celery worker answered within 1 s"}
    return {"state": "ok", "workers": sorted(name for r in replies for name in r)}


@extend_schema(responses={200: dict})
@api_view(["GET"])
@permission_classes([AllowAny])
@authentication_classes([])  # public: a stale token sent along is not an error
def health(request):
    """Component states: database, redis (broker), worker, each pool, each service's daemons
    and, under `strata up`, each child process (state, pid, restarts, last exit). No auth."""
    return Response(health_report())


@extend_schema(exclude=True)
@api_view(["GET"])
@permission_classes([AllowAny])
@authentication_classes([])  # public: a stale token sent along is not an error
def health_alias(request):
    """/api/v1/health/ answers like /api/v1/health; only the latter is in the schema."""
    return Response(health_report())


def health_report() -> dict:
    components = {
        "database": _check_database(),
        "redis": _check_broker(),
    }
    components["worker"] = (
        _check_worker() if components["redis"]["state"] == "ok"
        else {"state": "error", "detail": "broker unreachable"}
    )
    pools = {}
    if components["database"]["state"] == "ok":
        for _app, module in service_modules("health"):
            pools.update(module.pool_health() if hasattr(module, "pool_health") else {})
    services = _service_health()
    daemons = read_states(settings.DATA_DIR)   # restarts and last exit of strata up's children
    healthy = (all(c["state"] == "ok" for c in components.values())
               and all(p["state"] == "online" for p in pools.values())
               # a daemon not installed is a protocol off on this host, not a fault
               and all(d.get("state") in ("ok", "not_installed")
                       for s in services.values() for d in s.values())
               and all(d.get("state") == "running" for d in daemons.values()))
    return {
        "status": "ok" if healthy else "degraded",
        "host": socket.gethostname(),
        "data_dir": str(settings.DATA_DIR),
        "components": components,
        "pools": pools,
        "services": services,
        "daemons": daemons,
    }


def _service_health() -> dict:
    """Each service app's `health.py` `service_health()`: {daemon: {"state": "ok"|..., ...}}."""
    out = {}
    for app, module in service_modules("health"):
        if hasattr(module, "service_health"):
            try:
                out[app.label] = module.service_health()
            except Exception as exc:
                out[app.label] = {"service": {"state": "error", "detail": str(exc)}}
    return out
