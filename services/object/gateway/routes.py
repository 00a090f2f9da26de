"""One table from an S3 request's shape to its handler and IAM action.

A request's shape is its level (the service, a bucket or an object), its method and the
sub-resource :func:`shape` picks from its query (and, folded in, the ``x-amz-copy-source``
header and a browser form's content type). :data:`ROUTES` maps each shape to a
:class:`Route`: the S3 operation, its handler (``async (gw, req, bucket) -> Response``), the
IAM action a bucket policy names for it, and who checks access. The dispatcher
(:mod:`.app`), the authorizer (:mod:`.access`, with the action from here) and NotImplemented
(:data:`UNSUPPORTED`, answered by :mod:`.unconfigured`) all read this one table, so the
operation that runs is always the one that was authorized.

A request naming several sub-resources (``PUT ?uploadId&tagging``) takes the first of
:data:`PRECEDENCE` that has a route for its level and method; a request naming only
sub-resources without a route for its method is the plain operation (``DELETE key?acl`` is
DeleteObject, and is authorized as DeleteObject).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

from . import acl_ops, bucket_ops, bucket_tagging, cors, multipart, object_ops, post_object, protection_ops, \
    unconfigured

SERVICE, BUCKET, OBJECT = "service", "bucket", "object"
METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE")

# who checks access before the handler runs
AUTHORIZE = "authorize"   # the dispatcher: the route's action on the bucket or the object
EACH_KEY = "each key"     # the handler, per key (DeleteObjects); the dispatcher only refuses a caller
                          # who may delete nothing in the bucket, before the body is read
HANDLER = "handler"       # the handler alone (CreateBucket, ListBuckets, a form's own signature)

COPY = " + x-amz-copy-source"           # folded into a PUT's shape (CopyObject, UploadPartCopy)
FORM = "multipart/form-data"            # a bucket POST of a browser form (PostObject)

# Sub-resources S3 defines that this gateway does not implement: any request naming one is
# answered NotImplemented, except the GETs of bucket settings that S3 answers "not configured"
# (see .unconfigured) and GetObjectTorrent.
UNSUPPORTED = ("website", "logging", "notification", "replication", "requestPayment", "analytics", "inventory",
               "metrics", "intelligent-tiering", "accelerate", "torrent", "select")

# The order in which one sub-resource is picked from a query naming several: the unsupported
# ones first (NotImplemented whatever else the query says), then the order the gateway has
# always dispatched in (versions before uploads, uploads before uploadId, uploadId before the
# object settings).
PRECEDENCE = UNSUPPORTED + ("delete", "location", "versioning", "versions", "uploads", "uploadId", "lifecycle",
                            "policy", "encryption", "object-lock", "cors", "tagging", "attributes", "retention",
                            "legal-hold", "acl", "ownershipControls", "publicAccessBlock", "policyStatus",
                            "restore")

Handler = Callable[..., Awaitable]


@dataclass(frozen=True)
class Route:
    """One S3 operation: its handler, IAM action (``version_action`` when the request names a
    versionId) and who checks access (AUTHORIZE, EACH_KEY or HANDLER)."""

    operation: str
    handler: Handler
    action: str
    version_action: str = ""
    checks: str = AUTHORIZE

    def action_for(self, query: dict) -> str:
        """The IAM action of a request of this route with ``query``."""
        return self.version_action if self.version_action and query.get("versionId") else self.action


def _r(operation: str, handler: Handler, action: str, version_action: str = "", checks: str = AUTHORIZE) -> Route:
    return Route(operation, handler, "s3:" + action, "s3:" + version_action if version_action else "", checks)


ROUTES: dict[tuple[str, str, str], Route] = {
    (SERVICE, "GET", ""): _r("ListBuckets", bucket_ops.list_buckets, "ListAllMyBuckets", checks=HANDLER),

    (BUCKET, "HEAD", ""): _r("HeadBucket", bucket_ops.head_bucket, "ListBucket"),
    (BUCKET, "GET", ""): _r("ListObjects", bucket_ops.list_objects, "ListBucket"),
    (BUCKET, "PUT", ""): _r("CreateBucket", bucket_ops.create_bucket, "CreateBucket", checks=HANDLER),
    (BUCKET, "DELETE", ""): _r("DeleteBucket", bucket_ops.delete_bucket, "DeleteBucket"),
    (BUCKET, "POST", "?delete"): _r("DeleteObjects", object_ops.delete_objects, "DeleteObject", checks=EACH_KEY),
    (BUCKET, "POST", FORM): _r("PostObject", post_object.post_object, "PutObject", checks=HANDLER),
    (BUCKET, "GET", "?location"): _r("GetBucketLocation", bucket_ops.location, "GetBucketLocation"),
    (BUCKET, "GET", "?versioning"): _r("GetBucketVersioning", bucket_ops.get_versioning, "GetBucketVersioning"),
    (BUCKET, "PUT", "?versioning"): _r("PutBucketVersioning", bucket_ops.put_versioning, "PutBucketVersioning"),
    (BUCKET, "GET", "?versions"): _r("ListObjectVersions", bucket_ops.list_versions, "ListBucketVersions"),
    (BUCKET, "GET", "?uploads"): _r("ListMultipartUploads", multipart.list_uploads, "ListBucketMultipartUploads"),
    (BUCKET, "GET", "?lifecycle"): _r("GetBucketLifecycleConfiguration", bucket_ops.get_lifecycle,
                                      "GetLifecycleConfiguration"),
    (BUCKET, "PUT", "?lifecycle"): _r("PutBucketLifecycleConfiguration", bucket_ops.put_lifecycle,
                                      "PutLifecycleConfiguration"),
    (BUCKET, "DELETE", "?lifecycle"): _r("DeleteBucketLifecycle", bucket_ops.delete_lifecycle,
                                         "PutLifecycleConfiguration"),
    (BUCKET, "GET", "?policy"): _r("GetBucketPolicy", bucket_ops.get_policy, "GetBucketPolicy"),
    (BUCKET, "PUT", "?policy"): _r("PutBucketPolicy", bucket_ops.put_policy, "PutBucketPolicy"),
    (BUCKET, "DELETE", "?policy"): _r("DeleteBucketPolicy", bucket_ops.delete_policy, "DeleteBucketPolicy"),
    (BUCKET, "GET", "?encryption"): _r("GetBucketEncryption", protection_ops.get_encryption,
                                       "GetEncryptionConfiguration"),
    (BUCKET, "PUT", "?encryption"): _r("PutBucketEncryption", protection_ops.put_encryption,
                                       "PutEncryptionConfiguration"),
    (BUCKET, "DELETE", "?encryption"): _r("DeleteBucketEncryption", protection_ops.delete_encryption,
                                          "PutEncryptionConfiguration"),
    (BUCKET, "GET", "?object-lock"): _r("GetObjectLockConfiguration", protection_ops.get_lock_configuration,
                                        "GetBucketObjectLockConfiguration"),
    (BUCKET, "PUT", "?object-lock"): _r("PutObjectLockConfiguration", protection_ops.put_lock_configuration,
                                        "PutBucketObjectLockConfiguration"),
    (BUCKET, "GET", "?cors"): _r("GetBucketCors", cors.get_cors, "GetBucketCORS"),
    (BUCKET, "PUT", "?cors"): _r("PutBucketCors", cors.put_cors, "PutBucketCORS"),
    (BUCKET, "DELETE", "?cors"): _r("DeleteBucketCors", cors.delete_cors, "PutBucketCORS"),
    (BUCKET, "GET", "?tagging"): _r("GetBucketTagging", bucket_tagging.get_tagging, "GetBucketTagging"),
    (BUCKET, "PUT", "?tagging"): _r("PutBucketTagging", bucket_tagging.put_tagging, "PutBucketTagging"),
    (BUCKET, "DELETE", "?tagging"): _r("DeleteBucketTagging", bucket_tagging.delete_tagging, "PutBucketTagging"),
    (BUCKET, "GET", "?acl"): _r("GetBucketAcl", acl_ops.get_bucket_acl, "GetBucketAcl"),
    (BUCKET, "PUT", "?acl"): _r("PutBucketAcl", acl_ops.put_bucket_acl, "PutBucketAcl"),
    (BUCKET, "GET", "?ownershipControls"): _r("GetBucketOwnershipControls", acl_ops.get_ownership,
                                              "GetBucketOwnershipControls"),
    (BUCKET, "PUT", "?ownershipControls"): _r("PutBucketOwnershipControls", acl_ops.put_ownership,
                                              "PutBucketOwnershipControls"),
    (BUCKET, "DELETE", "?ownershipControls"): _r("DeleteBucketOwnershipControls", acl_ops.delete_ownership,
                                                 "PutBucketOwnershipControls"),
    (BUCKET, "GET", "?publicAccessBlock"): _r("GetPublicAccessBlock", acl_ops.get_public_access_block,
                                              "GetBucketPublicAccessBlock"),
    (BUCKET, "PUT", "?publicAccessBlock"): _r("PutPublicAccessBlock", acl_ops.put_public_access_block,
                                              "PutBucketPublicAccessBlock"),
    (BUCKET, "DELETE", "?publicAccessBlock"): _r("DeletePublicAccessBlock", acl_ops.delete_public_access_block,
                                                 "PutBucketPublicAccessBlock"),
    (BUCKET, "GET", "?policyStatus"): _r("GetBucketPolicyStatus", acl_ops.get_policy_status,
                                         "GetBucketPolicyStatus"),

    (OBJECT, "HEAD", ""): _r("HeadObject", object_ops.get_object, "GetObject", "GetObjectVersion"),
    (OBJECT, "GET", ""): _r("GetObject", object_ops.get_object, "GetObject", "GetObjectVersion"),
    (OBJECT, "PUT", ""): _r("PutObject", object_ops.put_object, "PutObject"),
    (OBJECT, "PUT", COPY): _r("CopyObject", object_ops.copy_object, "PutObject"),
    (OBJECT, "DELETE", ""): _r("DeleteObject", object_ops.delete_object, "DeleteObject", "DeleteObjectVersion"),
    (OBJECT, "POST", "?uploads"): _r("CreateMultipartUpload", multipart.create, "PutObject"),
    (OBJECT, "PUT", "?uploadId"): _r("UploadPart", multipart.upload_part, "PutObject"),
    (OBJECT, "PUT", "?uploadId" + COPY): _r("UploadPartCopy", multipart.upload_part_copy, "PutObject"),
    (OBJECT, "POST", "?uploadId"): _r("CompleteMultipartUpload", multipart.complete, "PutObject"),
    (OBJECT, "DELETE", "?uploadId"): _r("AbortMultipartUpload", multipart.abort, "AbortMultipartUpload"),
    (OBJECT, "GET", "?uploadId"): _r("ListParts", multipart.list_parts, "ListMultipartUploadParts"),
    (OBJECT, "GET", "?tagging"): _r("GetObjectTagging", object_ops.get_tagging, "GetObjectTagging",
                                    "GetObjectVersionTagging"),
    (OBJECT, "PUT", "?tagging"): _r("PutObjectTagging", object_ops.put_tagging, "PutObjectTagging",
                                    "PutObjectVersionTagging"),
    (OBJECT, "DELETE", "?tagging"): _r("DeleteObjectTagging", object_ops.delete_tagging, "DeleteObjectTagging",
                                       "DeleteObjectVersionTagging"),
    (OBJECT, "GET", "?attributes"): _r("GetObjectAttributes", object_ops.get_attributes, "GetObjectAttributes",
                                       "GetObjectVersionAttributes"),
    (OBJECT, "GET", "?retention"): _r("GetObjectRetention", protection_ops.get_retention, "GetObjectRetention"),
    (OBJECT, "PUT", "?retention"): _r("PutObjectRetention", protection_ops.put_retention, "PutObjectRetention"),
    (OBJECT, "GET", "?legal-hold"): _r("GetObjectLegalHold", protection_ops.get_legal_hold, "GetObjectLegalHold"),
    (OBJECT, "PUT", "?legal-hold"): _r("PutObjectLegalHold", protection_ops.put_legal_hold, "PutObjectLegalHold"),
    (OBJECT, "GET", "?acl"): _r("GetObjectAcl", acl_ops.get_object_acl, "GetObjectAcl", "GetObjectVersionAcl"),
    (OBJECT, "PUT", "?acl"): _r("PutObjectAcl", acl_ops.put_object_acl, "PutObjectAcl", "PutObjectVersionAcl"),
    (OBJECT, "POST", "?restore"): _r("RestoreObject", object_ops.restore_object, "RestoreObject"),
    (OBJECT, "GET", "?torrent"): _r("GetObjectTorrent", unconfigured.get_torrent, "GetObjectTorrent",
                                    "GetObjectVersionTorrent"),
}

# the IAM actions of the unsupported sub-resources, per method (GET, PUT, DELETE; HEAD and POST
# take the GET and PUT ones)
_UNSUPPORTED_ACTIONS = {
    "website": ("GetBucketWebsite", "PutBucketWebsite", "DeleteBucketWebsite"),
    "logging": ("GetBucketLogging", "PutBucketLogging", "PutBucketLogging"),
    "notification": ("GetBucketNotification", "PutBucketNotification", "PutBucketNotification"),
    "replication": ("GetReplicationConfiguration", "PutReplicationConfiguration", "PutReplicationConfiguration"),
    "requestPayment": ("GetBucketRequestPayment", "PutBucketRequestPayment", "PutBucketRequestPayment"),
    "analytics": ("GetAnalyticsConfiguration", "PutAnalyticsConfiguration", "PutAnalyticsConfiguration"),
    "inventory": ("GetInventoryConfiguration", "PutInventoryConfiguration", "PutInventoryConfiguration"),
    "metrics": ("GetMetricsConfiguration", "PutMetricsConfiguration", "PutMetricsConfiguration"),
    "intelligent-tiering": ("GetIntelligentTieringConfiguration", "PutIntelligentTieringConfiguration",
                            "PutIntelligentTieringConfiguration"),
    "accelerate": ("GetAccelerateConfiguration", "PutAccelerateConfiguration", "PutAccelerateConfiguration"),
    "torrent": ("GetObjectTorrent",) * 3,
    "select": ("GetObject",) * 3,   # SelectObjectContent needs s3:GetObject
}
_SLOT = {"GET": 0, "HEAD": 0, "PUT": 1, "POST": 1, "DELETE": 2}


def _add_unsupported() -> None:
    """A route for every method of every unsupported sub-resource, at both levels: the "not
    configured" answer of a bucket GET where S3 has one, NotImplemented otherwise."""
    for name, actions in _UNSUPPORTED_ACTIONS.items():
        for level in (BUCKET, OBJECT):
            for method in METHODS:
                if (level, method, "?" + name) in ROUTES:
                    continue
                answer = unconfigured.bucket_handler(name) if (level, method) == (BUCKET, "GET") else None
                if answer is not None:
                    route = _r(f"Get({name}), not configured", answer, actions[0])
                else:
                    route = _r(f"NotImplemented({name})", unconfigured.not_implemented(name), actions[_SLOT[method]])
                ROUTES[level, method, "?" + name] = route


_add_unsupported()

# the IAM actions a bucket policy may name that no request shape runs, and why
NOT_ROUTED = {
    "s3:BypassGovernanceRetention": "a permission the delete and retention handlers check, not an operation",
    "s3:DeleteBucketOwnershipControls": "listed by AWS; DeleteBucketOwnershipControls is authorized as "
                                        "s3:PutBucketOwnershipControls, as AWS documents",
    "s3:GetObjectVersionForReplication": "replication (not implemented)",
    "s3:ObjectOwnerOverrideToBucketOwner": "replication (not implemented)",
    "s3:ReplicateDelete": "replication (not implemented)",
    "s3:ReplicateObject": "replication (not implemented)",
    "s3:ReplicateTags": "replication (not implemented)",
}

# (level, method) -> {sub-resource with a route there: its rank in PRECEDENCE}
_RANKS = {(level, method): {name: rank for rank, name in enumerate(PRECEDENCE)
                            if (level, method, "?" + name) in ROUTES}
          for level in (SERVICE, BUCKET, OBJECT) for method in METHODS}


def shape(level: str, method: str, query: dict, headers: dict) -> str:
    """The shape of a request: the first sub-resource of :data:`PRECEDENCE` in ``query`` that
    has a route at ``level`` for ``method`` ("?name", or "" for none), with the copy source of
    a PUT and the form of a bucket POST folded in."""
    sub = ""
    if query:
        ranks = _RANKS.get((level, method), {})
        best = None
        for name in query:  # a query has few names: look each up, keep the first in PRECEDENCE
            rank = ranks.get(name)
            if rank is not None and (best is None or rank < ranks[best]):
                best = name
        if best is not None:
            sub = "?" + best
    if method == "PUT" and level == OBJECT and "x-amz-copy-source" in headers \
            and (OBJECT, "PUT", sub + COPY) in ROUTES:
        return sub + COPY
    if method == "POST" and level == BUCKET and not sub \
            and headers.get("content-type", "").lower().startswith(FORM):
        return FORM
    return sub


def resolve(level: str, method: str, query: dict, headers: dict) -> Route | None:
    """The route of a request (None: the method is not allowed there)."""
    return ROUTES.get((level, method, shape(level, method, query, headers)))
