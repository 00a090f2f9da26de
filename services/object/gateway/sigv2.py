"""AWS Signature Version 2: ``Authorization: AWS AK:sig`` and presigned
``AWSAccessKeyId/Signature/Expires`` query strings.

The string to sign is AWS's (the "Signing and Authenticating REST Requests" page of the S3
developer guide): method, Content-MD5, Content-Type, Date (or Expires for a query string),
the x-amz-* headers lowercased and sorted, and the resource (``/bucket/key`` as sent, plus
the sub-resources S3 signs). When ``x-amz-date`` is present it replaces Date, whose line is
then empty; a signature made with Date's value on that line is also accepted, as S3 does.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import time
from urllib.parse import unquote

from .errors import S3Error
from .sigv4 import MAX_SKEW_SECONDS, UNSIGNED, AuthContext, parse_amz_date

# query parameters that are part of the signed resource (botocore's list, plus S3's own)
SUBRESOURCES = frozenset([
    "accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete", "encryption", "inventory",
    "legal-hold", "lifecycle", "location", "logging", "metrics", "notification", "object-lock",
    "ownershipControls", "partNumber", "policy", "policyStatus", "publicAccessBlock", "replication",
    "requestPayment", "response-cache-control", "response-content-disposition", "response-content-encoding",
    "response-content-language", "response-content-type", "response-expires", "restore", "retention",
    "select", "select-type", "storageClass", "tagging", "torrent", "uploadId", "uploads", "versionId",
    "versioning", "versions", "website", "attributes"])


def sign(secret: str, string_to_sign: str, encoding: str = "utf-8") -> str:
    """Base64 HMAC-SHA1 of ``string_to_sign``."""
    digest = hmac.new(secret.encode(), string_to_sign.encode(encoding), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _matches(secret: str, sts: str, signature: str) -> bool:
    # header values arrive as bytes read as latin-1: clients sign the bytes they send (UTF-8),
    # or the UTF-8 of text they sent as latin-1 (see sigv4._matching_sts)
    encodings = ("utf-8",) if sts.isascii() else ("latin-1", "utf-8")
    return any(hmac.compare_digest(sign(secret, sts, e), signature) for e in encodings)


def canonical_resource(resource_path: str, raw_query: str) -> str:
    """The path as sent plus the signed sub-resources, sorted, values decoded."""
    subs = []
    for part in raw_query.split("&"):
        name, eq, value = part.partition("=")
        if name in SUBRESOURCES:
            subs.append((name, f"{name}={unquote(value)}" if eq else name))
    if not subs:
        return resource_path
    subs.sort(key=lambda s: s[0])
    return resource_path + "?" + "&".join(s for _, s in subs)


def _amz_lines(headers: dict[str, str]) -> str:
    lines = [f"{k}:{headers[k].strip()}"
             for k in sorted(headers) if k.startswith("x-amz-")]
    return "".join(line + "\n" for line in lines)


def string_to_sign(method: str, headers: dict[str, str], date: str, resource: str) -> str:
    """SigV2's string to sign (``headers`` lowercased; ``date`` the Date or Expires line)."""
    return (f"{method}\n{headers.get('content-md5', '')}\n{headers.get('content-type', '')}\n{date}\n"
            f"{_amz_lines(headers)}{resource}")


def _context(access_key: str, user: dict) -> AuthContext:
    return AuthContext(access_key, user.get("user", access_key), bool(user.get("admin")), UNSIGNED,
                       "", "", b"", "")


def verify_header(method: str, resource_path: str, raw_query: str, headers: dict[str, str],
                  auth: str, users: dict, now: float | None = None) -> AuthContext:
    """Check ``Authorization: AWS AK:signature``."""
    now = time.time() if now is None else now
    access_key, sep, signature = auth[4:].strip().rpartition(":")
    if not sep or not access_key or not signature:
        raise S3Error("InvalidArgument", "AWS authorization header is invalid. Expected AwsAccessKeyId:signature",
                      ArgumentName="Authorization", ArgumentValue=auth)
    user = users.get(access_key)
    if user is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
    amz_date = headers.get("x-amz-date")
    date = amz_date if amz_date is not None else headers.get("date")
    if not date:   # an x-amz-date sent empty does not fall back to Date
        raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
    ts = parse_amz_date(date)
    if ts < 0:
        raise S3Error("AccessDenied", f"Invalid date {date!r}")
    if abs(now - ts) > MAX_SKEW_SECONDS:
        raise S3Error("RequestTimeTooSkewed", RequestTime=date,
                      ServerTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                      MaxAllowedSkewMilliseconds=str(MAX_SKEW_SECONDS * 1000))
    dates = ["", headers.get("date", "")] if amz_date else [date]
    candidates = [string_to_sign(method, headers, d, canonical_resource(p, raw_query))
                  for p in _resource_paths(resource_path) for d in dates]
    if not any(_matches(user["secret_key"], sts, signature) for sts in candidates):
        raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=candidates[0])
    return _context(access_key, user)


def _resource_paths(resource_path: str) -> list[str]:
    # a bucket alone is signed as "/bucket/" by some clients (botocore) and "/bucket" by others
    if resource_path.count("/") == 1 and len(resource_path) > 1:
        return [resource_path, resource_path + "/"]
    return [resource_path]


def verify_query(method: str, resource_path: str, raw_query: str, headers: dict[str, str],
                 users: dict, now: float | None = None) -> AuthContext:
    """Check a presigned ``?AWSAccessKeyId=..&Expires=..&Signature=..`` request."""
    now = time.time() if now is None else now
    params: dict[str, str] = {}
    kept = []
    for part in raw_query.split("&"):
        name, _, value = part.partition("=")
        name = unquote(name)
        if name in ("AWSAccessKeyId", "Signature", "Expires"):
            params[name] = unquote(value.replace("+", "%20")) if name != "Signature" else unquote(value)
        else:
            kept.append(part)
    access_key, signature = params.get("AWSAccessKeyId", ""), params.get("Signature", "")
    expires = params.get("Expires", "")
    if not access_key or not signature or not expires:
        raise S3Error("AccessDenied", "Query-string authentication requires the Signature, Expires and "
                      "AWSAccessKeyId parameters")
    try:
        expires_at = int(expires)
    except ValueError:
        raise S3Error("AccessDenied", f"Invalid Expires {expires!r}") from None
    user = users.get(access_key)
    if user is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
    if now > expires_at:
        raise S3Error("AccessDenied", "Request has expired", Expires=time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(max(expires_at, 0))),
            ServerTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    # x-amz-* (and content-type / content-md5) given as query parameters are signed like headers
    signed_headers = dict(headers)
    signed_headers.pop("x-amz-date", None)
    for part in kept:
        name, _, value = part.partition("=")
        name = unquote(name).lower()
        if name.startswith("x-amz-") or name in ("content-type", "content-md5"):
            signed_headers[name] = unquote(value.replace("+", "%20"))
    candidates = [string_to_sign(method, signed_headers, expires, canonical_resource(p, "&".join(kept)))
                  for p in _resource_paths(resource_path)]
    if not any(_matches(user["secret_key"], sts, signature) for sts in candidates):
        raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=candidates[0])
    return _context(access_key, user)
