from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from plane.api.limits import INT64
from services.object.public import (BUCKET_NAME_RE, admin_endpoint, admin_endpoints,
                                    public_endpoint)
from services.protection import beat, bucket_snapshots
from services.protection.models import (
    Backup,
    BackupTarget,
    BucketReplication,
    Replica,
    Replication,
    ReplicationPeer,
    RestorePoint,
    SnapshotSchedule,
)
from services.storage.models import NAME_RE, FileSystem, Pool, Volume


def _source_fields():
    return {
        "filesystem": serializers.SlugRelatedField(
            slug_field="name", queryset=FileSystem.objects.all(), required=False,
            allow_null=True),
        "volume": serializers.SlugRelatedField(
            slug_field="name", queryset=Volume.objects.all(), required=False,
            allow_null=True),
    }


def _one_source(self, attrs, allow_bucket=False):
    inst = self.instance
    keys = ("filesystem", "volume") + (("bucket",) if allow_bucket else ())
    if inst is not None:
        if any(k in attrs and attrs[k] != getattr(inst, k) for k in keys):
            raise serializers.ValidationError("The protected object cannot change; delete "
                                              "and create anew.")
        return attrs
    given = [k for k in keys if attrs.get(k)]
    if len(given) != 1:
        raise serializers.ValidationError(
            "Give exactly one of " + ", ".join(f"'{k}'" for k in keys) + ".")
    return attrs


# "restore" is the name of the restore action under a bucket snapshot's URL, not a name.
SNAPSHOT_NAME_RE = r"^(?!restore$)[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def _bucket_field(**kw):
    return serializers.RegexField(BUCKET_NAME_RE, max_length=63, error_messages={
        "invalid": "Not a bucket name (3-63 lower-case letters, digits, '.' and '-')."}, **kw)


class SnapshotScheduleSerializer(serializers.ModelSerializer):
    filesystem = _source_fields()["filesystem"]
    volume = _source_fields()["volume"]
    bucket = _bucket_field(required=False, allow_blank=True)
    every_minutes = serializers.IntegerField(min_value=1, max_value=525600, required=False,
                                             allow_null=True)

    class Meta:
        model = SnapshotSchedule
        fields = ["id", "name", "filesystem", "volume", "bucket", "cron", "every_minutes",
                  "keep_last", "keep_hourly", "keep_daily", "keep_weekly", "enabled",
                  "last_run_at", "last_snapshot", "last_error", "created_at", "updated_at"]
        read_only_fields = ["last_run_at", "last_snapshot", "last_error", "created_at",
                            "updated_at"]

    def validate(self, attrs):
        _one_source(self, attrs, allow_bucket=True)
        if self.instance is not None and "name" in attrs and attrs["name"] != self.instance.name:
            raise serializers.ValidationError({"name": "A schedule cannot be renamed."})
        cron = attrs.get("cron", self.instance.cron if self.instance else "")
        every = attrs.get("every_minutes",
                          self.instance.every_minutes if self.instance else None)
        if "cron" in attrs and attrs["cron"] and "every_minutes" not in attrs:
            every = None
        if "every_minutes" in attrs and attrs["every_minutes"] and "cron" not in attrs:
            cron = ""
        if bool(cron) == bool(every):
            raise serializers.ValidationError(
                "Give exactly one of 'cron' (e.g. '0 * * * *') or 'every_minutes'.")
        if cron:
            beat.parse_cron(cron)
        keeps = [attrs.get(k, getattr(self.instance, k, 0) if self.instance else 0)
                 for k in ("keep_last", "keep_hourly", "keep_daily", "keep_weekly")]
        if not any(keeps):
            raise serializers.ValidationError(
                "Set a retention: at least one of keep_last, keep_hourly, keep_daily, "
                "keep_weekly above 0 (a schedule without one would fill the pool).")
        if self.instance is None and attrs.get("bucket"):
            bucket_snapshots.require_versioned(attrs["bucket"])  # 400 missing, 409 unversioned
        return attrs


# a credential travels in an HTTP header or an S3 signature: visible ASCII only (a token
# with other characters made the peer check fail with a 500: found by the API fuzz test)
CREDENTIAL_RE = r"^[\x21-\x7e]+$"
CREDENTIAL_HELP = "Visible ASCII characters only (no spaces)."


class ReplicationPeerSerializer(serializers.ModelSerializer):
    token = serializers.RegexField(CREDENTIAL_RE, write_only=True, max_length=200,
                                   help_text=f"The peer's API token. {CREDENTIAL_HELP}")

    class Meta:
        model = ReplicationPeer
        fields = ["id", "name", "url", "token", "state", "error", "remote_user",
                  "last_checked_at", "created_at"]
        read_only_fields = ["state", "error", "remote_user", "last_checked_at", "created_at"]


class ReplicationSerializer(serializers.ModelSerializer):
    filesystem = _source_fields()["filesystem"]
    volume = _source_fields()["volume"]
    peer = serializers.SlugRelatedField(slug_field="name",
                                        queryset=ReplicationPeer.objects.all())
    target_pool = serializers.RegexField(NAME_RE, max_length=63)
    target_name = serializers.RegexField(NAME_RE, max_length=63, required=False)
    every_minutes = serializers.IntegerField(min_value=1, max_value=525600, required=False,
                                             allow_null=True)
    lag_seconds = serializers.SerializerMethodField()

    class Meta:
        model = Replication
        fields = ["id", "name", "filesystem", "volume", "peer", "target_pool", "target_name",
                  "every_minutes", "enabled", "state", "error", "last_snapshot",
                  "last_snapshot_at", "lag_seconds", "last_run_at", "last_bytes",
                  "pending_snapshot", "failback", "created_at"]
        read_only_fields = ["state", "error", "last_snapshot", "last_snapshot_at",
                            "last_run_at", "last_bytes", "pending_snapshot", "failback",
                            "created_at"]

    def get_lag_seconds(self, rep) -> float | None:
        return rep.lag_seconds()

    def validate(self, attrs):
        _one_source(self, attrs)
        if self.instance is not None:
            for k in ("name", "peer", "target_pool", "target_name"):
                if k in attrs and attrs[k] != getattr(self.instance, k):
                    raise serializers.ValidationError({k: "Cannot change; delete and create "
                                                          "the replication anew."})
        else:
            source = attrs.get("filesystem") or attrs.get("volume")
            attrs.setdefault("target_name", source.name)
        return attrs


class ReplicaSerializer(serializers.ModelSerializer):
    class Meta:
        model = Replica
        fields = ["id", "name", "kind", "pool", "source_hint", "last_snapshot",
                  "last_received_at", "promoted_to", "created_at"]
        read_only_fields = fields


class ReplicaPromoteSerializer(serializers.Serializer):
    name = serializers.RegexField(NAME_RE, max_length=63)


class FailbackSerializer(serializers.Serializer):
    abandon = serializers.BooleanField(default=False)


class ReplicaSnapshotSerializer(serializers.Serializer):
    snapshot = serializers.RegexField(NAME_RE, max_length=63)


class FailbackStreamSerializer(serializers.Serializer):
    snapshot = serializers.RegexField(NAME_RE, max_length=63)
    parent = serializers.RegexField(NAME_RE, max_length=63)
    offset = serializers.IntegerField(min_value=0, max_value=INT64, default=0)


class TransferBeginSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["filesystem", "volume"])
    pool = serializers.RegexField(NAME_RE, max_length=63)
    name = serializers.RegexField(NAME_RE, max_length=63)
    snapshot = serializers.RegexField(NAME_RE, max_length=63)
    parent = serializers.CharField(max_length=63, required=False, allow_blank=True, default="")
    source = serializers.CharField(max_length=300, required=False, allow_blank=True,
                                   default="")


class TransferCommitSerializer(serializers.Serializer):
    bytes = serializers.IntegerField(min_value=0, max_value=INT64)
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$")


class BackupTargetSerializer(serializers.ModelSerializer):
    secret_key = serializers.RegexField(CREDENTIAL_RE, write_only=True, max_length=200,
                                        help_text=CREDENTIAL_HELP)
    access_key = serializers.RegexField(CREDENTIAL_RE, max_length=200,
                                        help_text=CREDENTIAL_HELP)

    class Meta:
        model = BackupTarget
        fields = ["id", "name", "endpoint_url", "region", "access_key", "secret_key",
                  "bucket", "prefix", "created_at"]
        read_only_fields = ["created_at"]


class BackupSerializer(serializers.ModelSerializer):
    filesystem = _source_fields()["filesystem"]
    volume = _source_fields()["volume"]
    target = serializers.SlugRelatedField(slug_field="name",
                                          queryset=BackupTarget.objects.all())
    every_minutes = serializers.IntegerField(min_value=1, max_value=525600, required=False,
                                             allow_null=True)
    restore_points = serializers.SerializerMethodField()

    class Meta:
        model = Backup
        fields = ["id", "name", "filesystem", "volume", "source_kind", "source_name",
                  "target", "every_minutes", "full_every", "state", "error", "last_run_at",
                  "restore_points", "created_at"]
        read_only_fields = ["source_kind", "source_name", "state", "error", "last_run_at",
                            "created_at"]

    def get_restore_points(self, backup) -> int:
        return backup.restore_points.count()

    def validate(self, attrs):
        _one_source(self, attrs)
        if self.instance is not None:
            for k in ("name", "target"):
                if k in attrs and attrs[k] != getattr(self.instance, k):
                    raise serializers.ValidationError({k: "Cannot change; create a new "
                                                          "backup instead."})
        return attrs


class RestorePointSerializer(serializers.ModelSerializer):
    backup = serializers.SlugRelatedField(slug_field="name", read_only=True)
    parent = serializers.SlugRelatedField(slug_field="snapshot", read_only=True, allow_null=True)
    full = serializers.BooleanField(read_only=True)

    class Meta:
        model = RestorePoint
        fields = ["id", "backup", "snapshot", "parent", "full", "kind", "key", "chunks",
                  "stream_bytes", "stored_bytes", "stream_sha256", "tree_sha256",
                  "created_at"]
        read_only_fields = fields


class RestorePointRestoreSerializer(serializers.Serializer):
    name = serializers.RegexField(NAME_RE, max_length=63)
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all(),
                                        required=False)


class BucketSnapshotSerializer(serializers.Serializer):
    """A bucket snapshot, as the S3 gateway keeps it (no row in the plane)."""

    id = serializers.CharField(read_only=True, help_text="BUCKET/NAME")
    bucket = _bucket_field()
    name = serializers.RegexField(SNAPSHOT_NAME_RE, max_length=63, required=False)
    created_at = serializers.DateTimeField(read_only=True)
    objects = serializers.IntegerField(read_only=True)
    bytes = serializers.IntegerField(read_only=True)


@extend_schema_serializer(many=False)       # one object holding the list, not a list
class BucketSnapshotListSerializer(serializers.Serializer):
    """GET /bucket-snapshots/: every snapshot (of ``?bucket=``), not paged (the gateway
    lists them all), under ``results`` as the paged lists are."""

    results = BucketSnapshotSerializer(many=True)


class BucketRestoreSerializer(serializers.Serializer):
    bucket = _bucket_field(help_text="the new bucket to restore into")


class BucketReplicationSerializer(serializers.ModelSerializer):
    bucket = _bucket_field()
    target = serializers.SlugRelatedField(slug_field="name",
                                          queryset=BackupTarget.objects.all())
    every_minutes = serializers.IntegerField(min_value=1, max_value=525600, required=False,
                                             allow_null=True)
    lag_seconds = serializers.SerializerMethodField()

    class Meta:
        model = BucketReplication
        fields = ["id", "name", "bucket", "target", "every_minutes", "enabled", "state",
                  "error", "watermark", "synced_at", "lag_seconds", "last_run_at",
                  "last_versions", "last_deletes", "last_bytes", "created_at"]
        read_only_fields = ["state", "error", "watermark", "synced_at", "last_run_at",
                            "last_versions", "last_deletes", "last_bytes", "created_at"]

    def get_lag_seconds(self, rep) -> float | None:
        return rep.lag_seconds()

    def validate(self, attrs):
        if self.instance is not None:
            for k in ("name", "bucket", "target"):
                if k in attrs and attrs[k] != getattr(self.instance, k):
                    raise serializers.ValidationError({k: "Cannot change; delete and create "
                                                          "the replication anew."})
            return attrs
        target = attrs["target"]
        ours = {url.rstrip("/") for url in (admin_endpoint(), public_endpoint(),
                                            *admin_endpoints())}
        if (target.endpoint_url.rstrip("/") in ours and target.bucket == attrs["bucket"]
                and not target.prefix.strip("/")):
            raise serializers.ValidationError({"target": (
                f"Target {target.name} is bucket {attrs['bucket']} itself; replicate to "
                "another bucket or prefix.")})
        return attrs
