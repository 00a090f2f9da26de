from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from plane.api.limits import INT32, INT64
from services.checkpoints.access import network_paths
from services.checkpoints.models import (
    CheckpointJob,
    CheckpointLease,
    CheckpointVersion,
)
from services.checkpoints.service import job_directory, latest_version, require_bucket
from services.storage.models import FileSystem, Pool


SHARD_SCHEMA = {
    "type": "object",
    "required": ["name", "size"],
    "properties": {
        "name": {"type": "string", "minLength": 1,
                 "description": "Path of the shard relative to the version, without '..'."},
        "size": {"type": "integer", "minimum": 0, "maximum": INT64},
        "sha256": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$", "nullable": True},
        "crc32c": {"oneOf": [{"type": "string"}, {"type": "integer", "minimum": 0}],
                   "nullable": True,
                   "description": "CRC-32C as 8 hex digits, base64 (as S3 sends it) or a number."},
    },
}


@extend_schema_field({"type": "array", "items": SHARD_SCHEMA})
class StoredManifestField(serializers.JSONField):
    """The manifest a version was committed with (empty until then)."""


@extend_schema_field({"type": "array", "minItems": 1, "items": SHARD_SCHEMA})
class ManifestField(serializers.JSONField):
    """Every shard of a version: `[{name, size, sha256?, crc32c?}]` (checked by
    verify.validate_manifest, whose messages name the bad entry)."""


class CheckpointJobSerializer(serializers.ModelSerializer):
    filesystem = serializers.SlugRelatedField(slug_field="name", required=False,
                                              allow_null=True,
                                              queryset=FileSystem.objects.filter(kept_by=""))
    capacity_pool = serializers.SlugRelatedField(slug_field="name", required=False,
                                                 allow_null=True, queryset=Pool.objects.all())
    keep_last = serializers.IntegerField(min_value=1, max_value=INT32, required=False)
    keep_every = serializers.IntegerField(min_value=1, max_value=INT32, required=False,
                                          allow_null=True)
    latest = serializers.SerializerMethodField()
    directory = serializers.SerializerMethodField()

    class Meta:
        model = CheckpointJob
        fields = ["id", "name", "tenant", "filesystem", "bucket", "directory", "keep_last",
                  "keep_every", "keep_newer_than", "tier_after", "capacity_pool",
                  "writing_timeout", "latest", "created_at", "updated_at"]
        read_only_fields = ["directory", "latest", "created_at", "updated_at"]

    def get_latest(self, job) -> dict | None:
        v = latest_version(job)
        return None if v is None else {"id": v.pk, "step": v.step, "state": v.state}

    def get_directory(self, job) -> str | None:
        return job_directory(job)

    def validate_bucket(self, bucket):
        if bucket and (self.instance is None or bucket != self.instance.bucket):
            require_bucket(bucket)  # 400 when it does not exist, 503 without a gateway
        return bucket

    def validate(self, attrs):
        if self.instance is not None:
            if attrs.get("name", self.instance.name) != self.instance.name:
                raise serializers.ValidationError({"name": "A checkpoint job cannot be renamed."})
            for key in ("filesystem", "bucket"):
                if key in attrs and attrs[key] != getattr(self.instance, key) \
                        and self.instance.versions.exists():
                    raise serializers.ValidationError(
                        {key: "The job already has versions; its location cannot change."})
        fs = attrs.get("filesystem", getattr(self.instance, "filesystem", None))
        bucket = attrs.get("bucket", getattr(self.instance, "bucket", ""))
        if fs is None and not bucket:
            raise serializers.ValidationError(
                "Give the job a 'filesystem' and/or a 'bucket' to write checkpoints to.")
        pool = attrs.get("capacity_pool", getattr(self.instance, "capacity_pool", None))
        tier_after = attrs.get("tier_after", getattr(self.instance, "tier_after", None))
        if tier_after is not None and pool is None:
            raise serializers.ValidationError(
                {"capacity_pool": "Give a capacity pool for tier_after to move versions to."})
        if tier_after is not None and tier_after.total_seconds() < 0:
            raise serializers.ValidationError({"tier_after": "Must not be negative."})
        if pool is not None and fs is not None and fs.pool_id == pool.pk:
            raise serializers.ValidationError(
                {"capacity_pool": f"File system {fs.name} is already in pool {pool.name}; "
                                  "give another pool to tier versions down to."})
        timeout = attrs.get("writing_timeout")
        if timeout is not None and timeout.total_seconds() <= 0:
            raise serializers.ValidationError({"writing_timeout": "Must be positive."})
        return attrs


class CheckpointVersionSerializer(serializers.ModelSerializer):
    job = serializers.SlugRelatedField(slug_field="name", read_only=True)
    manifest = StoredManifestField(read_only=True)
    relative_path = serializers.SerializerMethodField()
    leases = serializers.SerializerMethodField()

    class Meta:
        model = CheckpointVersion
        fields = ["id", "job", "step", "state", "tier", "path", "relative_path", "s3_prefix",
                  "location", "format", "size_bytes", "manifest", "pinned", "pin_reason", "leases",
                  "error", "created_at", "committed_at", "superseded_at", "deleted_at"]
        read_only_fields = fields

    def get_relative_path(self, v) -> str:
        """The directory relative to the file system's root (join with an NFS/SMB mount)."""
        fs = v.job.filesystem
        if not v.path or fs is None or not fs.path:
            return ""
        return v.path[len(fs.path):].lstrip("/")

    def get_leases(self, v) -> list:
        return [{"id": x.pk, "holder": x.holder, "expires_at": x.expires_at}
                for x in v.active_leases()]

    def to_representation(self, v):
        """Plus `nfs_path` and `smb_path` where the job's file system is exported or
        shared (absent otherwise; see services/checkpoints/access.py)."""
        data = super().to_representation(v)
        if self.with_network_paths:
            data.update(network_paths(v))
        return data

    with_network_paths = True


class CheckpointVersionListSerializer(CheckpointVersionSerializer):
    """Versions in a list: everything but the manifest (which may name thousands of shards)
    and the NFS/SMB paths (two queries per version; the version itself has them)."""

    with_network_paths = False

    class Meta(CheckpointVersionSerializer.Meta):
        fields = [f for f in CheckpointVersionSerializer.Meta.fields if f != "manifest"]
        read_only_fields = fields


class VersionBriefSerializer(serializers.ModelSerializer):
    class Meta:
        model = CheckpointVersion
        fields = ["id", "step", "state", "tier", "path", "s3_prefix", "committed_at"]
        read_only_fields = fields


class BeginSerializer(serializers.Serializer):
    step = serializers.IntegerField(min_value=0, max_value=INT64)


class CommitSerializer(serializers.Serializer):
    manifest = ManifestField()
    location = serializers.ChoiceField(
        choices=["path", "s3"], required=False, default="",
        help_text="Where the shards were written; default: the directory if the job has a "
                  "file system, else the S3 prefix.")


class LeaseRequestSerializer(serializers.Serializer):
    ttl_seconds = serializers.IntegerField(min_value=1, max_value=7 * 86400, default=3600)
    holder = serializers.CharField(max_length=200, required=False, default="")


class LeaseSerializer(serializers.ModelSerializer):
    version = serializers.PrimaryKeyRelatedField(read_only=True)
    active = serializers.BooleanField(read_only=True)

    class Meta:
        model = CheckpointLease
        fields = ["id", "version", "holder", "expires_at", "active", "created_at"]
        read_only_fields = fields


class PinSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=200, required=False, default="")
