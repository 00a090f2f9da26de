"""Desired state of the object service: the gateway's data root, buckets, S3 access keys and
the SSE-KMS keys the appliance keeps.

The S3 gateway (``services.object.gateway``) never reads these tables: the plane writes the
keys into the gateway's config file and mirrors buckets through its admin interface
(``services.object.service``). Usage columns are what the gateway last reported.
"""
from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from plane.models import Timestamped
from plane.secrets import SealedTextField
from plumbing.errors import Conflict
from services.storage.models import FileSystem
from services.storage.service import KeptByService

BUCKET_NAME_RE = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
bucket_name_validator = RegexValidator(
    BUCKET_NAME_RE,
    "Bucket names are 3-63 characters: lower-case letters, digits, '.' and '-', "
    "starting and ending with a letter or digit (S3's rules).",
)
S3_USER_RE = r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,62}$"


def refuse_filesystem_delete(collector, field, sub_objs, using):
    """``on_delete`` of the file system holding S3 data: refuse with a 409 the user can act on
    (PROTECT would surface as a 500)."""
    fs = getattr(sub_objs[0], field.name)
    if field.model is Gateway:
        raise KeptByService(fs, "deleting it")
    names = ", ".join(sorted(o.name for o in sub_objs))
    raise Conflict(f"File system {fs.name} holds S3 buckets ({names}); delete them first.")


class Gateway(models.Model):
    """The one S3 gateway: which file system holds its data, and its admin token.

    A single row, made by the bootstrap. Its file system cannot be deleted while the gateway
    uses it (409).
    """

    filesystem = models.ForeignKey(FileSystem, on_delete=refuse_filesystem_delete, related_name="+")
    admin_token = SealedTextField()  # sealed in the database (plane.secrets)
    region = models.CharField(max_length=32, default="us-east-1")
    # the SSE master key (wraps every SSE-S3 and SSE-KMS data key), sealed with the plane's
    # SECRET_KEY (plane.secrets); made at the first start, given to the gateway in its config
    sealed_master_key = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"S3 gateway on {self.filesystem.name}"


# what the plane sets (the gateway also takes grants over S3: the row then shows "custom")
CANNED_ACLS = ["private", "public-read", "public-read-write", "authenticated-read"]
OWNERSHIPS = ["BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter"]
PUBLIC_ACCESS_FLAGS = ["BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets"]


class Bucket(models.Model):
    """An S3 bucket: owner (an S3 user name), quotas and versioning; usage as last reported."""

    class Versioning(models.TextChoices):
        DISABLED = "Disabled"
        ENABLED = "Enabled"
        SUSPENDED = "Suspended"

    name = models.CharField(max_length=63, unique=True, validators=[bucket_name_validator])
    owner = models.CharField(max_length=63)
    filesystem = models.ForeignKey(FileSystem, on_delete=refuse_filesystem_delete,
                                   related_name="buckets")
    quota_bytes = models.BigIntegerField(null=True, blank=True)
    quota_objects = models.BigIntegerField(null=True, blank=True)
    versioning = models.CharField(max_length=16, choices=Versioning.choices,
                                  default=Versioning.DISABLED)
    encryption = models.CharField(max_length=16, blank=True, default="", choices=[
        ("", "none"), ("AES256", "SSE-S3 (AES256)"), ("aws:kms", "SSE-KMS (aws:kms)")],
        help_text="Default encryption of new objects that ask for none (as the gateway reports it).")
    kms_key_id = models.CharField(max_length=256, blank=True, default="")
    object_lock = models.BooleanField(default=False)
    lock_mode = models.CharField(max_length=16, blank=True, default="", choices=[
        ("", "none"), ("GOVERNANCE", "GOVERNANCE"), ("COMPLIANCE", "COMPLIANCE")],
        help_text="Default retention mode of new versions (Object Lock).")
    lock_days = models.PositiveIntegerField(null=True, blank=True)
    # access settings, as the gateway reports them (it holds them: see gateway/acl_ops.py)
    acl = models.CharField(max_length=32, default="private",
                           help_text="Canned ACL the bucket's grants amount to ('custom' otherwise).")
    public_access_block = models.JSONField(null=True, blank=True)
    object_ownership = models.CharField(max_length=32, blank=True, default="")
    # the class of work of its clients' requests (plumbing.workclass): the gateway's admission
    # queue orders requests by it; a bucket of training samples is "samples", one that
    # checkpoint jobs save into is "checkpoints"
    workload_class = models.CharField(max_length=16, default="samples", choices=[
        ("samples", "samples"), ("checkpoints", "checkpoints")])
    used_bytes = models.BigIntegerField(default=0)
    used_objects = models.BigIntegerField(default=0)
    usage_updated_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class S3Key(models.Model):
    """An S3 access key of an S3 user. The secret is kept sealed (Fernet, key derived from the
    plane's SECRET_KEY, see ``plane.secrets``) because SigV4 needs the secret
    itself on the gateway side; the API shows it only in the answer to create."""

    access_key = models.CharField(max_length=64, unique=True)
    sealed_secret = models.TextField()
    user = models.CharField(max_length=63, validators=[RegexValidator(
        S3_USER_RE, "S3 user names are 1-63 letters, digits and . _ @ + -")])
    admin = models.BooleanField(default=False)
    description = models.CharField(max_length=200, blank=True, default="")
    system = models.BooleanField(default=False)  # the plane's own key: not deletable by users
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self):
        return self.access_key


KMS_ACCOUNT = "000000000000"   # the account part of the appliance's KMS key ARNs
KMS_ALIAS_RE = r"^alias/(?!aws)[A-Za-z0-9_-]{1,250}$"


class KmsKey(Timestamped):
    """An SSE-KMS key kept by the appliance (what AWS KMS is to S3): an id (a UUID, as AWS's),
    an optional alias (``alias/NAME``), a description, enabled or not, and its 256-bit key
    material, sealed with the plane's SECRET_KEY (``plane.secrets``) like S3 secrets and the
    SSE master key. The gateway gets the material only in its 0600 config file; a disabled
    key refuses new objects and reads of its objects (``KMS.DisabledException``). A key is
    never deleted: its objects would be unreadable for good."""

    key_id = models.CharField(max_length=36, unique=True)
    alias = models.CharField(max_length=256, unique=True, null=True, blank=True, validators=[RegexValidator(
        KMS_ALIAS_RE, "An alias is alias/NAME: NAME of letters, digits, _ and - (not starting with aws, which AWS reserves).")])
    description = models.CharField(max_length=256, blank=True, default="")
    enabled = models.BooleanField(default=True)
    sealed_material = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["created_at", "id"]

    def arn(self, region: str) -> str:
        return f"arn:aws:kms:{region}:{KMS_ACCOUNT}:key/{self.key_id}"

    def __str__(self):
        return self.alias or self.key_id
