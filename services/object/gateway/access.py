"""Who may do a request: bucket policy, ACLs, object ownership and the public access block,
combined as S3 documents it.

For a request by ``user`` ('' when unsigned) doing ``action``:

1. an admin key may do anything;
2. a bucket policy statement that denies it refuses it (even to the owner);
3. a policy statement that allows it allows it (unless the policy is public and the bucket's
   public access block has RestrictPublicBuckets: then only the owner's and signed-in users'
   own grants count);
4. the bucket owner may do anything else with the bucket and the objects in it;
5. otherwise the ACLs decide (unless the bucket's object ownership is BucketOwnerEnforced,
   which turns ACLs off): listing needs READ on the bucket, writing and deleting objects WRITE
   on the bucket, reading an object READ on the object, ?acl READ_ACP / WRITE_ACP on the
   resource (an object's owner always has both). Grants to AllUsers and AuthenticatedUsers
   are ignored when the public access block has IgnorePublicAcls.

Everything read here is in memory (bucket settings) or one index point lookup (an object's
ACL, only when a non-owner reads it), so no request waits on a database beyond its own.
"""
from __future__ import annotations

from . import acl, policy
from .buckets import Bucket
from .errors import ERROR_CODES, S3Error

ERROR_CODES.update({
    "OwnershipControlsNotFoundError": (404, "The bucket ownership controls were not found"),
    "NoSuchPublicAccessBlockConfiguration": (404, "The public access block configuration was not found"),
})

PAB_FIELDS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
OWNERSHIPS = ("BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter")

# action -> permission a bucket ACL must grant
BUCKET_PERMISSION = {
    "s3:ListBucket": "READ", "s3:ListBucketVersions": "READ", "s3:ListBucketMultipartUploads": "READ",
    "s3:PutObject": "WRITE", "s3:DeleteObject": "WRITE", "s3:DeleteObjectVersion": "WRITE",
    "s3:AbortMultipartUpload": "WRITE", "s3:ListMultipartUploadParts": "WRITE",
    "s3:GetBucketAcl": "READ_ACP", "s3:PutBucketAcl": "WRITE_ACP",
}
# action -> permission an object ACL must grant
OBJECT_PERMISSION = {
    "s3:GetObject": "READ", "s3:GetObjectVersion": "READ",
    "s3:GetObjectAcl": "READ_ACP", "s3:GetObjectVersionAcl": "READ_ACP",
    "s3:PutObjectAcl": "WRITE_ACP", "s3:PutObjectVersionAcl": "WRITE_ACP",
}
# sub-resources handled here -> (GET action, PUT action, DELETE action)
CONFIG_ACTIONS = {
    "ownershipControls": ("s3:GetBucketOwnershipControls", "s3:PutBucketOwnershipControls",
                          "s3:PutBucketOwnershipControls"),
    "publicAccessBlock": ("s3:GetBucketPublicAccessBlock", "s3:PutBucketPublicAccessBlock",
                          "s3:PutBucketPublicAccessBlock"),
    "policyStatus": ("s3:GetBucketPolicyStatus", "s3:GetBucketPolicyStatus", "s3:GetBucketPolicyStatus"),
}
# condition keys that tie a policy statement to known callers: such a statement is not public
LIMITING_KEYS = {"aws:sourceip", "aws:sourcearn", "aws:sourcevpc", "aws:sourcevpce", "aws:sourceaccount",
                 "aws:sourceowner", "aws:principalaccount", "aws:principalarn", "aws:principalorgid",
                 "aws:userid", "aws:username", "s3:dataaccesspointarn", "s3:dataaccesspointaccount"}


def action_of(method: str, query: dict, has_key: bool) -> str:
    """The IAM action of a request (the ACL and settings sub-resources, then :mod:`.policy`'s)."""
    if "acl" in query:
        version = "Version" if has_key and query.get("versionId") else ""
        kind = "Object" if has_key else "Bucket"
        verb = "Get" if method in ("GET", "HEAD") else "Put"
        return f"s3:{verb}{kind}{version}Acl"
    if not has_key:
        for name, actions in CONFIG_ACTIONS.items():
            if name in query:
                return actions[0] if method in ("GET", "HEAD") else actions[1 if method == "PUT" else 2]
    return policy.action_for(method, query, has_key)


def public_access_block(bucket: Bucket) -> dict:
    """The bucket's public access block (all False when none is set)."""
    return bucket.settings.get("public_access_block") or {}


def acls_enabled(bucket: Bucket) -> bool:
    """False when object ownership is BucketOwnerEnforced (ACLs disabled)."""
    return bucket.settings.get("ownership") != "BucketOwnerEnforced"


def bucket_grants(bucket: Bucket) -> list:
    """The bucket ACL in force (the owner alone when ACLs are disabled or none was set)."""
    grants = bucket.settings.get("acl") if acls_enabled(bucket) else None
    return grants if grants is not None else acl.owner_only(bucket.owner)


def object_owner(bucket: Bucket, meta: dict) -> str:
    """Who owns an object version (the bucket owner when ACLs are disabled)."""
    if not acls_enabled(bucket):
        return bucket.owner
    return meta.get("ow") or bucket.owner


def object_grants(bucket: Bucket, meta: dict) -> list:
    """An object version's ACL in force."""
    grants = meta.get("acl") if acls_enabled(bucket) else None
    return grants if grants is not None else acl.owner_only(object_owner(bucket, meta))


def policy_is_public(doc: dict | None) -> bool:
    """Whether a bucket policy grants access to anyone (S3's definition, roughly: an Allow whose
    principal is ``*`` and whose conditions do not pin the caller down)."""
    for st in _statements(doc):
        if st.get("Effect") != "Allow" or "NotPrincipal" in st:
            continue
        principal = st.get("Principal")
        values = principal.get("AWS", []) if isinstance(principal, dict) else principal
        values = values if isinstance(values, list) else [values]
        if "*" not in values:
            continue
        condition = st.get("Condition") or {}
        keys = {k.lower() for op in condition.values() if isinstance(op, dict) for k in op}
        if not keys & LIMITING_KEYS:
            return True
    return False


def _statements(doc) -> list:
    st = doc.get("Statement", []) if isinstance(doc, dict) else []
    return st if isinstance(st, list) else [st]


def _policy_decision(bucket: Bucket, user: str, action: str, resource: str) -> str | None:
    """'Deny', 'Allow' or None from the bucket policy (asked through :func:`policy.is_allowed`:
    as its owner, only a Deny refuses; as a stranger, only an Allow allows)."""
    doc = bucket.settings.get("policy")
    if not doc:
        return None
    if not policy.is_allowed(doc, user=user, admin=False, owner=user, action=action, resource=resource):
        return "Deny"
    if policy.is_allowed(doc, user=user, admin=False, owner="\0", action=action, resource=resource):
        if user != bucket.owner and public_access_block(bucket).get("RestrictPublicBuckets") \
                and policy_is_public(doc):
            return None
        return "Allow"
    return None


def denied(resource: str, message: str | None = None) -> S3Error:
    return S3Error("AccessDenied", message, resource=f"/{resource}")


def authorize(gw, req) -> Bucket:
    """The request's bucket, if its signer (or an anonymous caller) may do this request."""
    bucket = gw.buckets.get(req.bucket)
    auth = req.auth
    if auth.admin:
        return bucket
    action = action_of(req.method, req.query, bool(req.key))
    resource = f"{req.bucket}/{req.key}" if req.key else req.bucket
    user = auth.user
    decision = _policy_decision(bucket, user, action, resource)
    if decision == "Deny":
        raise denied(resource)
    if decision == "Allow" or (user and user == bucket.owner):
        return bucket
    if not acls_enabled(bucket):
        raise denied(resource)
    ignore_public = bool(public_access_block(bucket).get("IgnorePublicAcls"))
    perm = BUCKET_PERMISSION.get(action)
    if perm is not None:
        if acl.granted(bucket_grants(bucket), user, perm, ignore_public):
            return bucket
        raise denied(resource)
    perm = OBJECT_PERMISSION.get(action)
    if perm is not None:
        rec = bucket.index.get(req.key, req.query.get("versionId") or None)
        if rec is None or rec.marker:
            # S3 answers 404 only to callers who may list the bucket
            if acl.granted(bucket_grants(bucket), user, "READ", ignore_public):
                return bucket
            raise denied(resource)
        if perm in ("READ_ACP", "WRITE_ACP") and user and user == object_owner(bucket, rec.meta):
            return bucket
        if acl.granted(object_grants(bucket, rec.meta), user, perm, ignore_public):
            return bucket
    raise denied(resource)


def may_read_object(gw, req, bucket: Bucket, key: str, version_id: str | None) -> bool:
    """Whether the signer may read ``key`` of ``bucket`` (a copy's source)."""
    saved = (req.bucket, req.key, req.method, req.query)
    req.bucket, req.key, req.method = bucket.name, key, "GET"
    req.query = {"versionId": version_id} if version_id else {}
    try:
        authorize(gw, req)
        return True
    except S3Error:
        return False
    finally:
        req.bucket, req.key, req.method, req.query = saved


def check_acl_allowed(bucket: Bucket, grants: list | None, bucket_owner_full: bool = True) -> None:
    """Refuse an ACL the bucket's settings forbid: any but the owner's FULL_CONTROL when ACLs are
    disabled (AccessControlListNotSupported), a public one under BlockPublicAcls (AccessDenied)."""
    if grants is None:
        return
    if not acls_enabled(bucket) and not (bucket_owner_full and acl.only_owner_full_control(grants, bucket.owner)):
        raise S3Error("AccessControlListNotSupported")
    if public_access_block(bucket).get("BlockPublicAcls") and acl.is_public(grants):
        raise S3Error("AccessDenied", "Public ACLs are blocked by this bucket's public access block "
                      "(BlockPublicAcls)", resource=f"/{bucket.name}")


def check_policy_allowed(bucket: Bucket, doc: dict) -> None:
    """Refuse a public bucket policy under BlockPublicPolicy (AccessDenied, as S3 does)."""
    if public_access_block(bucket).get("BlockPublicPolicy") and policy_is_public(doc):
        raise S3Error("AccessDenied", "Public policies are blocked by this bucket's public access block "
                      "(BlockPublicPolicy)", resource=f"/{bucket.name}")


def new_object_acl(gw, req, bucket: Bucket, meta: dict) -> dict:
    """Set the owner (``ow``) and ACL (``acl``) of an object a request writes into ``meta``
    (a copy starts from its source's metadata: those are replaced, never copied)."""
    meta.pop("ow", None)
    meta.pop("acl", None)
    writer = req.auth.user or acl.ANONYMOUS_ID
    owner = writer
    if not acls_enabled(bucket) or (bucket.settings.get("ownership") == "BucketOwnerPreferred"
                                    and req.headers.get("x-amz-acl") == "bucket-owner-full-control"):
        owner = bucket.owner
    grants = None
    if "x-amz-acl" in req.headers or any(h in req.headers for h in acl.GRANT_HEADERS):
        grants = acl.from_request(req.headers, acl.Users(gw.config["users"]), owner, bucket.owner, for_object=True)
        check_acl_allowed(bucket, grants)
    if not acls_enabled(bucket):
        return meta
    if owner != bucket.owner:
        meta["ow"] = owner
    if grants is not None and grants != acl.owner_only(owner):
        meta["acl"] = grants
    return meta
