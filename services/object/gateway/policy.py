"""Bucket policies, a subset: Allow/Deny by principal, action and resource (with ``*``).

Evaluation, for a request by ``user`` doing ``action`` on ``resource``: an admin key may do
anything; a matching Deny refuses (even the bucket owner); the owner may do anything else;
anyone else needs a matching Allow. ``Condition`` blocks are refused (``MalformedPolicy``)
rather than silently ignored. Only object and listing actions can be granted to others:
bucket configuration (versioning, lifecycle, policy, deletion) stays with the owner.
"""
from __future__ import annotations

import fnmatch
import json

from .errors import S3Error

ARN_PREFIX = "arn:aws:s3:::"
OWNER_ONLY = {"s3:PutBucketVersioning", "s3:PutLifecycleConfiguration", "s3:PutBucketPolicy",
              "s3:GetBucketPolicy", "s3:DeleteBucketPolicy", "s3:DeleteBucket"}


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def parse_policy(body: bytes, bucket: str) -> dict:
    """Validate a policy document; ``MalformedPolicy`` with the reason otherwise."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise S3Error("MalformedPolicy", f"Policies must be valid JSON: {exc}") from None
    statements = doc.get("Statement") if isinstance(doc, dict) else None
    if not statements:
        raise S3Error("MalformedPolicy", "Policy has no Statement")
    for st in _as_list(statements):
        if not isinstance(st, dict) or st.get("Effect") not in ("Allow", "Deny"):
            raise S3Error("MalformedPolicy", "Every statement needs Effect Allow or Deny")
        if "Condition" in st or "NotAction" in st or "NotPrincipal" in st or "NotResource" in st:
            raise S3Error("MalformedPolicy", "Condition, NotAction, NotPrincipal and NotResource are not supported")
        for key in ("Principal", "Action", "Resource"):
            if key not in st:
                raise S3Error("MalformedPolicy", f"Every statement needs {key}")
        for res in _as_list(st["Resource"]):
            if not str(res).startswith(ARN_PREFIX + bucket):
                raise S3Error("MalformedPolicy", f"Policy has invalid resource {res!r}")
    return doc


def _principal_matches(principal, user: str) -> bool:
    if principal == "*":
        return True
    values = _as_list(principal.get("AWS", [])) if isinstance(principal, dict) else _as_list(principal)
    for value in values:
        value = str(value)
        if value == "*" or value == user or value.rsplit("/", 1)[-1] == user or value.rsplit(":", 1)[-1] == user:
            return True
    return False


def _matches(st: dict, user: str, action: str, resource: str) -> bool:
    if not _principal_matches(st["Principal"], user):
        return False
    if not any(fnmatch.fnmatchcase(action, a) for a in _as_list(st["Action"])):
        return False
    return any(fnmatch.fnmatchcase(resource, str(r)[len(ARN_PREFIX):]) for r in _as_list(st["Resource"]))


def is_allowed(policy: dict | None, *, user: str, admin: bool, owner: str, action: str, resource: str) -> bool:
    """Whether ``user`` may do ``action`` on ``resource`` ("bucket" or "bucket/key")."""
    if admin:
        return True
    statements = _as_list(policy.get("Statement", [])) if policy else []
    if any(st["Effect"] == "Deny" and _matches(st, user, action, resource) for st in statements):
        return False
    if user == owner:
        return True
    if action in OWNER_ONLY:
        return False
    return any(st["Effect"] == "Allow" and _matches(st, user, action, resource) for st in statements)


def action_for(method: str, query: dict, has_key: bool, copy: bool = False) -> str:
    """The IAM-style action name of an S3 request."""
    if not has_key:
        if "policy" in query:
            return {"GET": "s3:GetBucketPolicy", "PUT": "s3:PutBucketPolicy"}.get(method, "s3:DeleteBucketPolicy")
        if "versioning" in query:
            return "s3:PutBucketVersioning" if method == "PUT" else "s3:GetBucketVersioning"
        if "lifecycle" in query:
            return "s3:PutLifecycleConfiguration" if method != "GET" else "s3:GetLifecycleConfiguration"
        if method == "DELETE":
            return "s3:DeleteBucket"
        if method == "POST" and "delete" in query:
            return "s3:DeleteObject"
        if "versions" in query:
            return "s3:ListBucketVersions"
        if "uploads" in query:
            return "s3:ListBucketMultipartUploads"
        if "location" in query:
            return "s3:GetBucketLocation"
        return "s3:ListBucket"
    if "tagging" in query:
        return {"GET": "s3:GetObjectTagging", "PUT": "s3:PutObjectTagging"}.get(method, "s3:DeleteObjectTagging")
    if method in ("GET", "HEAD"):
        if "uploadId" in query:
            return "s3:ListMultipartUploadParts"
        return "s3:GetObjectVersion" if query.get("versionId") else "s3:GetObject"
    if method == "DELETE":
        if "uploadId" in query:
            return "s3:AbortMultipartUpload"
        return "s3:DeleteObjectVersion" if query.get("versionId") else "s3:DeleteObject"
    return "s3:PutObject"
