"""Console pages of the object service: buckets (each with its settings page, see
``console_urls.py``), S3 access keys and KMS keys."""
from plane.pages import Action, Column, FormField, Page
from services.object.models import CANNED_ACLS, PUBLIC_ACCESS_FLAGS, Bucket, KmsKey, S3Key
from services.object.service import sync_for_listing


def buckets():
    """Rows as the gateway has them now (buckets made or deleted over S3, usage)."""
    sync_for_listing()
    return Bucket.objects.select_related("filesystem", "filesystem__pool")


PAGES = [
    Page(slug="buckets", title="Buckets", group="Object", api="/api/v1/buckets/",
         queryset=buckets, detail="/console/buckets/",
         help="S3 buckets served by the gateway. Usage is what the gateway last reported "
              "(every stored version counts). A bucket can be deleted only when empty. A bucket's "
              "page shows its ACL, policy, CORS, encryption and Object Lock settings.",
         columns=[Column("name", "Name"), Column("owner", "Owner"),
                  Column("filesystem.pool.name", "Pool"), Column("versioning", "Versioning"),
                  Column("acl", "ACL"), Column("object_ownership", "Object ownership"),
                  Column("used_bytes", "Used", "bytes"), Column("used_objects", "Objects"),
                  Column("quota_bytes", "Quota", "bytes"), Column("quota_objects", "Object quota"),
                  Column("created_at", "Created", "time")],
         form=[FormField("name", "Name", required=True,
                         help="3-63 lower-case letters, digits, '.' and '-'."),
               FormField("owner", "Owner", help="S3 user name; default: you."),
               FormField("quota_bytes", "Quota", "bytes"),
               FormField("quota_objects", "Object quota", "number"),
               FormField("versioning", "Versioning", "select", choices=["Disabled", "Enabled"],
                         default="Disabled")],
         actions=[Action("Set quota", "/api/v1/buckets/{key}/", method="PATCH",
                         fields=[FormField("quota_bytes", "Quota", "bytes"),
                                 FormField("quota_objects", "Object quota", "number")]),
                  Action("Enable versioning", "/api/v1/buckets/{key}/", method="PATCH",
                         body={"versioning": "Enabled"}),
                  Action("Suspend versioning", "/api/v1/buckets/{key}/", method="PATCH",
                         body={"versioning": "Suspended"}),
                  Action("Set ACL", "/api/v1/buckets/{key}/", method="PATCH",
                         fields=[FormField("acl", "Canned ACL", "select", choices=CANNED_ACLS)]),
                  Action("Block public access", "/api/v1/buckets/{key}/", method="PATCH",
                         body={"public_access_block": {f: True for f in PUBLIC_ACCESS_FLAGS}}),
                  Action("Remove public access block", "/api/v1/buckets/{key}/", method="PATCH",
                         body={"public_access_block": None})]),
    Page(slug="s3-keys", title="S3 access keys", group="Object", api="/api/v1/s3-keys/",
         lookup="access_key", queryset=lambda: S3Key.objects.select_related("created_by"),
         help="Access keys for the S3 endpoint. A secret is never shown again after it is "
              "created: type your own secret below (16+ characters), or create the key with "
              "the API (POST /api/v1/s3-keys/), whose answer carries the generated secret once. "
              "Deleting a key revokes it at once.",
         columns=[Column("access_key", "Access key"), Column("user", "S3 user"),
                  Column("admin", "Admin"), Column("description", "Description"),
                  Column("created_by.username", "Created by"), Column("created_at", "Created", "time")],
         form=[FormField("user", "S3 user", help="Default: you. Only admins choose another."),
               FormField("secret_key", "Secret key", "password",
                         help="16-128 characters; leave empty to generate one (API only shows it)."),
               FormField("description", "Description"),
               FormField("admin", "Admin key (sees every bucket)", "checkbox")]),
    Page(slug="kms-keys", title="KMS keys", group="Object", api="/api/v1/kms-keys/", lookup="key_id",
         queryset=lambda: KmsKey.objects.select_related("created_by"), deletable=False,
         help="SSE-KMS keys kept by the appliance: name one (id, alias or ARN) in "
              "x-amz-server-side-encryption-aws-kms-key-id or a bucket's default encryption. A "
              "disabled key refuses new objects and reads of its objects until enabled again. Keys "
              "are never deleted: their objects would be unreadable.",
         columns=[Column("key_id", "Key id"), Column("alias", "Alias"), Column("description", "Description"),
                  Column("enabled", "Enabled"), Column("created_by.username", "Created by"),
                  Column("created_at", "Created", "time")],
         form=[FormField("alias", "Alias", help="alias/NAME or NAME (letters, digits, _ and -)."),
               FormField("description", "Description")],
         actions=[Action("Disable", "/api/v1/kms-keys/{key}/disable/",
                         confirm="Disable KMS key {name}? Its objects cannot be read until it is enabled."),
                  Action("Enable", "/api/v1/kms-keys/{key}/enable/")]),
]
