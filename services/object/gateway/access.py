"""Access checks of S3 requests against the bucket policy, with the request's condition keys.

:func:`policy_context` builds the :class:`.policy.Context` of a request (``aws:SourceIp``,
``aws:SecureTransport``, ``aws:username``, ``aws:CurrentTime``, ``aws:Referer``,
``aws:UserAgent``, ``s3:prefix``/``s3:delimiter``/``s3:max-keys`` of listings, the
``s3:x-amz-*`` request headers, ``s3:VersionId``, ``s3:RequestObjectTag/<k>`` from
``x-amz-tagging`` and ``s3:ExistingObjectTag/<k>`` read from the index only when a policy
asks). It is built only for buckets that have a policy: requests to others cost nothing.
"""
from __future__ import annotations

import time
from urllib.parse import parse_qsl

from . import policy
from .buckets import Bucket
from .errors import S3Error
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
    user = req.auth.user if req.auth is not None else None
    values: dict = {
        "aws:SourceIp": req.client or None,
        "aws:SecureTransport": "true" if req.scheme == "https" else "false",
        "aws:CurrentTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "aws:EpochTime": str(int(now)),
        "aws:Referer": h.get("referer"),
        "aws:UserAgent": h.get("user-agent"),
        "aws:PrincipalType": "User" if user is not None else "Anonymous",
    }
    if user is not None:
        values["aws:username"] = user
        values["aws:userid"] = user
        values["s3:signatureversion"] = "AWS4-HMAC-SHA256"
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
    lazy = {}
    if bucket is not None and key:
        def existing_tag(tag_key: str):
            rec = bucket.index.get(key, q.get("versionId") or None)
            if rec is None or rec.marker:
                return None
            return rec.meta.get("tags", {}).get(tag_key)
        lazy["s3:ExistingObjectTag/"] = existing_tag
    return policy.Context(values, lazy)


def check_access(req: Request, bucket: Bucket, action: str, key: str = "") -> None:
    """``AccessDenied`` unless the signer may do ``action`` on ``bucket`` (or its ``key``)."""
    auth = req.auth
    resource = f"{bucket.name}/{key}" if key else bucket.name
    doc = bucket.settings.get("policy")
    ctx = policy_context(req, bucket, key, action) if doc else None
    if not policy.is_allowed(doc, user=auth.user, admin=auth.admin, owner=bucket.owner, action=action,
                             resource=resource, context=ctx):
        raise S3Error("AccessDenied", resource=f"/{resource}")
