from rest_framework import serializers

from plane.api.limits import INT64
from plane.roles import ADMIN, role_of
from services.object.kms import normalize_alias
from services.object.models import CANNED_ACLS, OWNERSHIPS, Bucket, KmsKey, S3Key


class PublicAccessBlockSerializer(serializers.Serializer):
    """S3 Block Public Access: the four flags (absent ones are false)."""

    BlockPublicAcls = serializers.BooleanField(default=False)
    IgnorePublicAcls = serializers.BooleanField(default=False)
    BlockPublicPolicy = serializers.BooleanField(default=False)
    RestrictPublicBuckets = serializers.BooleanField(default=False)


class BucketSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(max_length=63, required=False,
                                  help_text="S3 user owning the bucket (default: you).")
    filesystem = serializers.SlugRelatedField(slug_field="name", read_only=True)
    pool = serializers.CharField(source="filesystem.pool.name", read_only=True)
    quota_bytes = serializers.IntegerField(min_value=1, max_value=INT64, required=False,
                                           allow_null=True)
    quota_objects = serializers.IntegerField(min_value=1, max_value=INT64, required=False,
                                             allow_null=True)
    versioning = serializers.ChoiceField(choices=Bucket.Versioning.choices, required=False)
    encryption = serializers.ChoiceField(choices=["", "AES256", "aws:kms"], required=False,
                                         help_text="Default encryption of new objects: '' (none), AES256 "
                                                   "(SSE-S3) or aws:kms (SSE-KMS with kms_key_id).")
    kms_key_id = serializers.CharField(max_length=256, required=False, allow_blank=True)
    object_lock = serializers.BooleanField(required=False, help_text=(
        "Object Lock (WORM): versions under retention or legal hold cannot be deleted. Needs "
        "versioning Enabled (a new bucket gets it); cannot be turned off."))
    lock_mode = serializers.ChoiceField(choices=["", "GOVERNANCE", "COMPLIANCE"], required=False,
                                        help_text="Default retention mode of new versions ('' none).")
    lock_days = serializers.IntegerField(min_value=1, max_value=36500, required=False, allow_null=True,
                                         help_text="Default retention in days (with lock_mode).")
    acl = serializers.ChoiceField(choices=CANNED_ACLS, required=False,
                                  help_text="Canned ACL of the bucket ('custom': grants set over S3).")
    public_access_block = PublicAccessBlockSerializer(required=False, allow_null=True,
                                                      help_text="S3 Block Public Access flags (null: none).")
    object_ownership = serializers.ChoiceField(choices=OWNERSHIPS, required=False, allow_blank=True,
                                               help_text="S3 Object Ownership ('' = not set: ACLs apply).")
    workload_class = serializers.ChoiceField(
        choices=["samples", "checkpoints"], required=False,
        help_text="Class of work of the bucket's requests: the S3 gateway admits them in that "
                  "class's queue, weighted by its share (/api/v1/qos/classes/).")

    class Meta:
        model = Bucket
        fields = ["id", "name", "owner", "filesystem", "pool", "quota_bytes", "quota_objects",
                  "workload_class", "versioning", "encryption", "kms_key_id", "object_lock", "lock_mode", "lock_days",
                  "acl", "public_access_block", "object_ownership", "used_bytes",
                  "used_objects", "usage_updated_at", "created_at"]
        read_only_fields = ["used_bytes", "used_objects", "usage_updated_at", "created_at"]

    def validate(self, attrs):
        self._validate_protection(attrs)
        if self.instance is None:
            request = self.context.get("request")
            attrs.setdefault("owner", request.user.username if request else "admin")
            if attrs.get("versioning") == Bucket.Versioning.SUSPENDED:
                raise serializers.ValidationError(
                    {"versioning": "A new bucket is created Disabled or Enabled."})
            if attrs.get("object_lock"):
                attrs["versioning"] = Bucket.Versioning.ENABLED
            return attrs
        if self.instance.object_lock and attrs.get("object_lock") is False:
            raise serializers.ValidationError({"object_lock": "Object Lock cannot be turned off (S3's rule)."})
        for field in ("name", "owner"):
            if field in attrs and attrs[field] != getattr(self.instance, field):
                raise serializers.ValidationError({field: f"A bucket's {field} cannot change."})
        if attrs.get("versioning") == Bucket.Versioning.DISABLED and \
                self.instance.versioning != Bucket.Versioning.DISABLED:
            raise serializers.ValidationError(
                {"versioning": "Versioning, once enabled, can only be suspended (S3's rule)."})
        return attrs

    def _merged(self, attrs: dict, name: str):
        if name in attrs:
            return attrs[name]
        return getattr(self.instance, name) if self.instance is not None else None

    def _validate_protection(self, attrs: dict) -> None:
        """kms_key_id goes with aws:kms; a default retention needs Object Lock, a mode and days."""
        if self._merged(attrs, "kms_key_id") and self._merged(attrs, "encryption") != "aws:kms":
            raise serializers.ValidationError({"kms_key_id": "A KMS key id goes with encryption aws:kms."})
        mode, days = self._merged(attrs, "lock_mode"), self._merged(attrs, "lock_days")
        if ("lock_mode" in attrs or "lock_days" in attrs) and bool(mode) != bool(days):
            raise serializers.ValidationError({"lock_days": "A default retention needs both lock_mode and "
                                                            "lock_days."})
        if mode and not self._merged(attrs, "object_lock"):
            raise serializers.ValidationError({"lock_mode": "A default retention needs object_lock."})


class BucketDetailSerializer(BucketSerializer):
    """One bucket, with its policy and CORS rules as the gateway holds them."""

    policy = serializers.JSONField(read_only=True, allow_null=True,
                                   help_text="The bucket policy document (null: none).")
    cors = serializers.JSONField(read_only=True, allow_null=True,
                                 help_text="CORS rules as S3's JSON (AllowedOrigins, AllowedMethods, "
                                           "AllowedHeaders, ExposeHeaders, MaxAgeSeconds, ID); null: none.")

    class Meta(BucketSerializer.Meta):
        fields = BucketSerializer.Meta.fields + ["policy", "cors"]


class BucketPolicySerializer(serializers.Serializer):
    policy = serializers.DictField(allow_null=True, help_text="An S3 bucket policy document (null: none).")


class BucketCorsSerializer(serializers.Serializer):
    rules = serializers.ListField(child=serializers.DictField(), allow_null=True, max_length=100,
                                  help_text="CORS rules as S3's JSON (null: none).")


SECRET_MIN_DISTINCT = 8


def _is_run(text: str) -> bool:
    """Whether (nearly) every character is the one before it plus or minus one: abcd...,
    9876..., 0123456789abcdef (one jump from 9 to a)."""
    steps = [ord(b) - ord(a) for a, b in zip(text, text[1:])]
    return max(steps.count(1), steps.count(-1)) >= 0.8 * len(steps)


def _is_periodic(text: str) -> bool:
    """Whether ``text`` is a shorter piece repeated (abcabcabc..., with a partial last one)."""
    return any(text == (text[:n] * (len(text) // n + 1))[:len(text)]
               for n in range(1, len(text) // 2 + 1))


class S3KeySerializer(serializers.ModelSerializer):
    """Lists and shows keys without their secrets."""

    user = serializers.CharField(max_length=63, required=False,
                                 help_text="S3 user the key acts as (default: you).")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True,
                                              allow_null=True)  # null: made by the plane

    class Meta:
        model = S3Key
        fields = ["id", "access_key", "user", "admin", "description", "system", "created_by",
                  "created_at"]
        read_only_fields = ["access_key", "system", "created_by", "created_at"]


class S3KeyCreateSerializer(S3KeySerializer):
    """Create: the answer carries ``secret_key`` (and the endpoint) this once."""

    secret_key = serializers.CharField(min_length=16, max_length=128, required=False,
                                       write_only=True, help_text=(
                                           "Leave empty to generate one. At least 16 characters, "
                                           f"{SECRET_MIN_DISTINCT} or more of them different, "
                                           "not a repeated pattern or a run (abcd..., 1234...)."))

    class Meta(S3KeySerializer.Meta):
        fields = S3KeySerializer.Meta.fields + ["secret_key"]

    def validate_user(self, value):
        S3Key._meta.get_field("user").run_validators(value)
        return value

    def validate_secret_key(self, secret):
        # a secret signs every request of the key: one guessed from a short list (a repeated
        # character, a pattern, a run like 0123456789abcdef) is no secret
        if len(set(secret)) < SECRET_MIN_DISTINCT or _is_run(secret) or _is_periodic(secret):
            raise serializers.ValidationError(
                f"This secret is too easy to guess: give at least 16 characters with at least "
                f"{SECRET_MIN_DISTINCT} different ones and no repeated pattern or run, or leave "
                "it empty to have one generated.")
        return secret

    def validate(self, attrs):
        request = self.context["request"]
        attrs.setdefault("user", request.user.username)
        if role_of(request.user) != ADMIN and (attrs.get("admin") or attrs["user"] != request.user.username):
            raise serializers.ValidationError(
                "Only an admin may create keys for another S3 user or admin keys.")
        return attrs


class KmsKeySerializer(serializers.ModelSerializer):
    """An SSE-KMS key of the appliance (its material is never shown)."""

    alias = serializers.CharField(max_length=256, required=False, allow_null=True, allow_blank=True,
                                  help_text="alias/NAME (or NAME): another name clients may use for the key.")
    arn = serializers.SerializerMethodField(help_text="The key's ARN (clients may name the key by it).")
    key_state = serializers.SerializerMethodField(help_text="Enabled or Disabled, as AWS KMS says.")
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True,
                                              allow_null=True)  # null: made by the plane

    class Meta:
        model = KmsKey
        fields = ["id", "key_id", "arn", "alias", "description", "enabled", "key_state", "created_by",
                  "created_at", "updated_at"]
        read_only_fields = ["key_id", "enabled", "created_by", "created_at", "updated_at"]

    def get_arn(self, key) -> str:
        return key.arn(self.context.get("region") or "us-east-1")

    def get_key_state(self, key) -> str:
        return "Enabled" if key.enabled else "Disabled"

    def validate_alias(self, value):
        value = normalize_alias(value)
        if value is not None:
            KmsKey._meta.get_field("alias").run_validators(value)
            if KmsKey.objects.filter(alias=value).exclude(pk=getattr(self.instance, "pk", None)).exists():
                raise serializers.ValidationError(f"A KMS key with alias {value} exists already.")
        return value
