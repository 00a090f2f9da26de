from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Q
from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from plane.models import AuditEvent, Job
from plane.roles import ROLES, role_of
from plumbing.errors import Conflict


class JobSerializer(serializers.ModelSerializer):
    """A job; ``bytes_done``/``bytes_total`` for jobs that move bytes (the total may be an
    estimate while running), with the rate since it started and the ETA derived from them
    (null when unknown; the ETA only while running)."""

    url = serializers.HyperlinkedIdentityField(view_name="job-detail")
    user = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    rate_bytes_per_s = serializers.SerializerMethodField()
    eta_seconds = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id", "url", "kind", "state", "progress", "message", "result", "error",
            "bytes_done", "bytes_total", "rate_bytes_per_s", "eta_seconds",
            "target_type", "target_name", "cancel_requested", "user", "node",
            "created_at", "started_at", "heartbeat_at", "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_rate_bytes_per_s(self, job: Job):
        return job.rate_bytes_per_s()

    @extend_schema_field(serializers.FloatField(allow_null=True))
    def get_eta_seconds(self, job: Job):
        return job.eta_seconds()


class AuditEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEvent
        fields = ["id", "time", "username", "method", "path", "action", "status_code",
                  "result", "detail", "remote_addr"]
        read_only_fields = fields


@extend_schema_serializer(many=False)
class MeSerializer(serializers.Serializer):
    """The caller: GET /api/v1/me/ answers one object, not a page."""

    username = serializers.CharField(read_only=True)
    role = serializers.ChoiceField(choices=ROLES, read_only=True)


def _active_admins():
    return User.objects.filter(is_active=True).filter(
        Q(is_superuser=True) | Q(groups__name="admin"))


def last_admin(user) -> bool:
    """True when ``user`` is the only active admin (superuser or in the admin group). Call it
    inside a transaction after :func:`lock_admins` so that two admins cannot each remove the
    other at the same moment."""
    return not _active_admins().exclude(pk=user.pk).exists()


def lock_admins() -> None:
    """Lock the rows of the active admins until the transaction ends (PostgreSQL; SQLite's
    immediate transactions already run one writer at a time)."""
    list(User.objects.select_for_update().filter(
        pk__in=list(_active_admins().values_list("pk", flat=True))))


class UserSerializer(serializers.ModelSerializer):
    role = serializers.ChoiceField(choices=ROLES, default="viewer")
    password = serializers.CharField(write_only=True, min_length=8, required=False)

    class Meta:
        model = User
        fields = ["id", "username", "role", "password", "is_active", "date_joined"]
        read_only_fields = ["id", "date_joined"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["role"] = role_of(instance)
        return data

    def validate(self, attrs):
        if self.instance is None and not attrs.get("password"):
            raise serializers.ValidationError({"password": "A new user needs a password."})
        return attrs

    def _apply(self, user, role, password):
        if password:
            user.set_password(password)
        user.save()
        if role:
            user.is_superuser = user.is_staff = role == "admin"
            user.save()
            user.groups.set([Group.objects.get_or_create(name=role)[0]])
        return user

    def create(self, validated):
        role, password = validated.pop("role", "viewer"), validated.pop("password", None)
        return self._apply(User(**validated), role, password)

    def update(self, instance, validated):
        role, password = validated.pop("role", None), validated.pop("password", None)
        request = self.context.get("request")
        if (validated.get("is_active") is False and request is not None
                and request.user.pk == instance.pk):
            raise Conflict("You cannot deactivate your own account (your token and sessions "
                           "would stop at once); another admin can.")
        with transaction.atomic():
            lock_admins()
            leaves_admins = (role not in (None, "admin") or validated.get("is_active") is False)
            if leaves_admins and role_of(instance) == "admin" and last_admin(instance):
                raise Conflict(f"{instance.username} is the last active admin; make another "
                               "user admin first.")
            for key, value in validated.items():
                setattr(instance, key, value)
            return self._apply(instance, role, password)


class TokenSerializer(serializers.Serializer):
    """An API token: whose, since when, and the first characters of its key (the whole key
    only in the answer that creates it: the plane keeps only its digest)."""

    user = serializers.CharField(source="user.username", read_only=True)
    created = serializers.DateTimeField(read_only=True)
    key_prefix = serializers.SerializerMethodField()
    key = serializers.SerializerMethodField()

    def get_key_prefix(self, token) -> str:
        return token.prefix

    def get_key(self, token) -> str | None:
        return self.context.get("key")
