"""Who may do a request: bucket policy, ACLs, object ownership and the public access block,
combined as S3 documents it.

For a request by ``user`` ('' when unsigned) doing ``action``:

1. an admin key may do anything;
2. a bucket policy statement that denies it refuses it (even to the owner, who keeps only
   the policy actions themselves, so a policy cannot lock the owner out);
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

Policy conditions see the request's condition keys: :func:`policy_context` builds the
:class:`.policy.Context` of a request (``aws:SourceIp``, ``aws:SecureTransport``,
``aws:username``, ``aws:CurrentTime``, ``aws:Referer``,
``aws:UserAgent``, ``s3:prefix``/``s3:delimiter``/``s3:max-keys`` of listings, the
``s3:x-amz-*`` request headers, ``s3:VersionId``, ``s3:RequestObjectTag/<k>`` from
``x-amz-tagging`` and ``s3:ExistingObjectTag/<k>`` read from the index only when a policy
asks). It is built only for buckets that have a policy: requests to others cost nothing.
"""
from __future__ import annotations

import time
from urllib.parse import parse_qsl

from . import acl, objectlock, policy
from .buckets import Bucket
from .errors import ERROR_CODES, S3Error
from .request import Request

HEADER_KEYS = ("x-amz-acl", "x-amz-server-side-encryption", "x-amz-server-side-encryption-aws-kms-key-id",
               "x-amz-server-side-encryption-customer-algorithm", "x-amz-copy-source",
               "x-amz-metadata-directive", "x-amz-storage-class", "x-amz-website-redirect-location",
               "x-amz-content-sha256", "x-amz-grant-read", "x-amz-grant-write", "x-amz-grant-read-acp",
               "x-amz-grant-write-acp", "x-amz-grant-full-control", "x-amz-object-lock-mode",
               "x-amz-object-lock-retain-until-date", "x-amz-object-lock-legal-hold",
               "x-amz-object-ownership", "x-amz-checksum-algorithm", "if-none-match", "if-match")
LIST_ACTIONS = ("s3:ListBucket", "s3:ListBucketVersions")


def policy_context(req: Request, bucket: Bucket | None, key: str = "", action: str = "") -> policy.Context:
    """The condition keys of ``req`` (for ``action`` on ``key`` of ``bucket``)."""
    h, q = req.headers, req.query
    now = time.time()
    user = req.auth.user if req.auth is not None and req.auth.user else None  # None: anonymous
    values: dict = {
        "aws:SourceIp": req.client or None,
        "aws:SecureTransport": "true" if req.scheme == "https" else "false",
        "aws:EpochTime": str(int(now)),
        "aws:Referer": h.get("referer"),
        "aws:UserAgent": h.get("user-agent"),
        "aws:PrincipalType": "User" if user is not None else "Anonymous",
    }
    if user is not None:
        values["aws:username"] = user
        values["aws:userid"] = user
        values["s3:signatureversion"] = "AWS4-HMAC-SHA256" if req.auth.scope else "AWS"
        values["s3:authType"] = "REST-HEADER" if "authorization" in h else "REST-QUERY-STRING"
    if action in LIST_ACTIONS:
        values["s3:prefix"] = q.get("prefix", "")
        for name in ("delimiter", "max-keys"):
            if name in q:
                values[f"s3:{name}"] = q[name]
    for name in HEADER_KEYS:
        if name in h:
            values[f"s3:{name}"] = h[name]
    if "versionId" in q:
        values["s3:VersionId"] = q["versionId"]
    if "x-amz-tagging" in h:
        tags = parse_qsl(h["x-amz-tagging"], keep_blank_values=True)
        for k, v in tags:
            values[f"s3:RequestObjectTag/{k}"] = v
        values["s3:RequestObjectTagKeys"] = [k for k, _ in tags]
    lazy = {"aws:CurrentTime": lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}
    if bucket is not None and key:
        def existing_tag(tag_key: str):
            rec = bucket.index.get(key, q.get("versionId") or None)
            if rec is None or rec.marker:
                return None
            return rec.meta.get("tags", {}).get(tag_key)
        lazy["s3:ExistingObjectTag/"] = existing_tag
    return policy.Context(values, lazy)

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
# condition keys that tie a policy statement to known callers: such a statement is not public
LIMITING_KEYS = {"aws:sourceip", "aws:sourcearn", "aws:sourcevpc", "aws:sourcevpce", "aws:sourceaccount",
                 "aws:sourceowner", "aws:principalaccount", "aws:principalarn", "aws:principalorgid",
                 "aws:userid", "aws:username", "s3:dataaccesspointarn", "s3:dataaccesspointaccount"}


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


def denied(resource: str, message: str | None = None) -> S3Error:
    return S3Error("AccessDenied", message, resource=f"/{resource}")


def _policy_decision(req: Request, bucket: Bucket, action: str, key: str) -> str | None:
    """DENY, ALLOW or None from the bucket policy (an Allow of a public policy does not count
    for others than the owner under RestrictPublicBuckets)."""
    doc = bucket.settings.get("policy")
    if not doc:
        return None
    user = req.auth.user or None
    resource = f"{bucket.name}/{key}" if key else bucket.name
    decision = policy.evaluate(doc, user=user, action=action, resource=resource,
                               context=policy_context(req, bucket, key, action))
    if decision == policy.ALLOW and user != bucket.owner \
            and public_access_block(bucket).get("RestrictPublicBuckets") and policy_is_public(doc):
        return None
    return decision


def check_access(req: Request, bucket: Bucket, action: str, key: str = "", version_id: str | None = None) -> None:
    """``AccessDenied`` unless the signer (or an anonymous caller) may do ``action`` on
    ``bucket`` (or its ``key``, ``version_id``): policy, owner, then ACLs (see above)."""
    auth = req.auth
    if auth.admin:
        return
    user = auth.user
    owner = bool(user) and user == bucket.owner
    resource = f"{bucket.name}/{key}" if key else bucket.name
    if owner and action in policy.POLICY_ACTIONS:
        return  # a policy cannot lock its bucket's owner out of changing it
    decision = _policy_decision(req, bucket, action, key)
    if decision == policy.DENY:
        raise denied(resource)
    if decision == policy.ALLOW or owner:
        return
    if not acls_enabled(bucket):
        raise denied(resource)
    ignore_public = bool(public_access_block(bucket).get("IgnorePublicAcls"))
    perm = BUCKET_PERMISSION.get(action)
    if perm is not None:
        if acl.granted(bucket_grants(bucket), user, perm, ignore_public):
            return
        raise denied(resource)
    perm = OBJECT_PERMISSION.get(action)
    if perm is not None and key:
        rec = bucket.index.get(key, version_id)
        if rec is None or rec.marker:
            # S3 answers 404 only to callers who may list the bucket
            if acl.granted(bucket_grants(bucket), user, "READ", ignore_public):
                return
            raise denied(resource)
        if perm in ("READ_ACP", "WRITE_ACP") and user and user == object_owner(bucket, rec.meta):
            return
        if acl.granted(object_grants(bucket, rec.meta), user, perm, ignore_public):
            return
    raise denied(resource)


def check_foreign_object(req: Request, bucket: Bucket, meta: dict, action: str, key: str) -> None:
    """A read, ?acl read or ?acl write of an object version that someone other than the bucket
    owner owns (metadata ``ow``), checked once the version is read. As S3 documents (object
    context), only the object's ACL grants access to such an object: owning the bucket does not
    (the bucket owner may still list and delete it), nor does a bucket policy Allow (a Deny
    still refuses, in :func:`check_access`). ``AccessDenied`` unless the ACL grants it."""
    owner = meta.get("ow")
    if owner is None:   # the bucket owner's object (the usual case): check_access decided
        return
    user = req.auth.user
    if req.auth.admin or (user and user == owner) or not acls_enabled(bucket):
        return
    ignore_public = bool(public_access_block(bucket).get("IgnorePublicAcls"))
    if not acl.granted(object_grants(bucket, meta), user, OBJECT_PERMISSION[action], ignore_public):
        raise denied(f"{bucket.name}/{key}")


def may_bypass_governance(req: Request, bucket: Bucket, key: str, version_id: str | None = None) -> bool:
    """Whether ``req`` asks to bypass GOVERNANCE retention (``x-amz-bypass-governance-retention:
    true``) and may: ``s3:BypassGovernanceRetention`` on the object, which admins and the bucket
    owner have unless the bucket policy denies it, and others only through a policy Allow (no
    ACL grants it). Without it the header is ignored, so a GOVERNANCE-locked version stays
    refused with 403 ``AccessDenied``, as S3 answers."""
    if not objectlock.bypass(req.headers):
        return False
    try:
        check_access(req, bucket, "s3:BypassGovernanceRetention", key, version_id)
    except S3Error:
        return False
    return True


def authorize(gw, req: Request, action: str) -> Bucket:
    """The request's bucket, if its signer (or an anonymous caller) may do ``action`` there (the
    IAM action of the request's route, see .routes)."""
    bucket = gw.buckets.get(req.bucket)
    check_access(req, bucket, action, req.key, req.query.get("versionId") or None)
    return bucket


def check_expected_owner(req: Request, bucket: Bucket, header: str = "x-amz-expected-bucket-owner") -> None:
    """``AccessDenied`` when the request names an expected owner of ``bucket`` (the header
    ``x-amz-expected-bucket-owner``, or ``x-amz-source-expected-bucket-owner`` for a copy's
    source) other than its owner's ID, as S3 answers."""
    expected = req.headers.get(header)
    if expected is not None and expected != bucket.owner:
        raise denied(bucket.name, f"The bucket is not owned by {expected} ({header})")


def check_may_delete_some(req: Request, bucket: Bucket) -> None:
    """``AccessDenied`` for a DeleteObjects caller who may delete no key of ``bucket``, before
    its body is read: not an admin or the owner, no bucket policy Allow that could apply to it,
    no ACL grant of WRITE. Each key is then checked as its own DeleteObject."""
    user = req.auth.user or None
    if req.auth.admin or (user and user == bucket.owner):
        return
    doc = bucket.settings.get("policy")
    if doc and policy.may_allow(doc, user=user, actions=("s3:DeleteObject", "s3:DeleteObjectVersion")):
        return
    if acls_enabled(bucket) and acl.granted(bucket_grants(bucket), user, "WRITE",
                                            bool(public_access_block(bucket).get("IgnorePublicAcls"))):
        return
    raise denied(bucket.name)


def check_acl_allowed(bucket: Bucket, grants: list | None, canned: str | None = None) -> None:
    """Refuse an ACL the bucket's settings forbid: a public one under BlockPublicAcls
    (AccessDenied); when ACLs are disabled (BucketOwnerEnforced), any but the bucket owner's
    full control (AccessControlListNotSupported): S3 still takes the canned
    ``bucket-owner-full-control`` (``canned``: the x-amz-acl sent) or grants, in headers or
    XML, that give the bucket owner FULL_CONTROL and nothing else; any other canned ACL,
    ``private`` included, is refused."""
    if grants is None:
        return
    if not acls_enabled(bucket):
        if canned is not None:
            owner_full = canned.strip() == "bucket-owner-full-control"
        else:
            owner_full = bool(grants) and acl.only_owner_full_control(grants, bucket.owner)
        if not owner_full:
            raise S3Error("AccessControlListNotSupported")
    if public_access_block(bucket).get("BlockPublicAcls") and acl.is_public(grants):
        raise S3Error("AccessDenied", "Public ACLs are blocked by this bucket's public access block "
                      "(BlockPublicAcls)", resource=f"/{bucket.name}")


def check_policy_allowed(bucket: Bucket, doc: dict) -> None:
    """Refuse a public bucket policy under BlockPublicPolicy (AccessDenied, as S3 does)."""
    if public_access_block(bucket).get("BlockPublicPolicy") and policy_is_public(doc):
        raise S3Error("AccessDenied", "Public policies are blocked by this bucket's public access block "
                      "(BlockPublicPolicy)", resource=f"/{bucket.name}")


def new_object_acl(gw, req: Request, bucket: Bucket, meta: dict) -> dict:
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
        check_acl_allowed(bucket, grants, req.headers.get("x-amz-acl"))
    if not acls_enabled(bucket):
        return meta
    if owner != bucket.owner:
        meta["ow"] = owner
    if grants is not None and grants != acl.owner_only(owner):
        meta["acl"] = grants
    return meta
