"""AWS Signature Version 4 verification: Authorization header and presigned query strings.

The canonical request is rebuilt from what arrived on the wire (the raw path as sent, query
parameters re-encoded and sorted, the signed headers); the signature is compared in constant
time. Chunk and trailer signatures of aws-chunked bodies are checked by :mod:`.chunked`
with :func:`chunk_string_to_sign` and the :class:`AuthContext` this module returns.
"""
from __future__ import annotations

import calendar
import hashlib
import hmac
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import lru_cache
from urllib.parse import quote, unquote

from .errors import S3Error

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_SKEW_SECONDS = 15 * 60
MAX_PRESIGN_EXPIRES = 7 * 24 * 3600

UNSIGNED = "UNSIGNED-PAYLOAD"
STREAMING_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
STREAMING_UNSIGNED_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING_MODES = {STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER}


@dataclass
class AuthContext:
    """Who signed a request, and what chunk signatures must chain from."""

    access_key: str
    user: str
    admin: bool
    payload_hash: str          # x-amz-content-sha256 value (or UNSIGNED-PAYLOAD)
    amz_date: str
    scope: str
    signing_key: bytes
    seed_signature: str


@lru_cache(maxsize=256)
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The derived SigV4 key for one day, region and service."""
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    k = hmac.new(k, region.encode(), hashlib.sha256).digest()
    k = hmac.new(k, service.encode(), hashlib.sha256).digest()
    return hmac.new(k, b"aws4_request", hashlib.sha256).digest()


def hmac_hex(key: bytes, msg: str) -> str:
    """Hex HMAC-SHA256 of ``msg`` (one-shot: OpenSSL's, not the pure-Python HMAC object)."""
    return hmac.digest(key, msg.encode(), "sha256").hex()


def _uri_encode(value: str) -> str:
    return quote(value, safe="-_.~")


def canonical_query(raw_query: str, skip: str | None = None) -> str:
    """Sorted, re-encoded query string as SigV4 wants it."""
    if not raw_query:
        return ""
    pairs = []
    for part in raw_query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        name = unquote(name.replace("+", "%20"))
        if name == skip:
            continue
        value = unquote(value.replace("+", "%20"))
        pairs.append((_uri_encode(name), _uri_encode(value)))
    pairs.sort()
    return "&".join(f"{k}={v}" for k, v in pairs)


def _canonical_headers(headers: dict[str, str], signed: list[str]) -> str:
    lines = []
    for name in signed:
        value = headers.get(name)
        if value is None:
            raise S3Error("SignatureDoesNotMatch", f"Signed header {name!r} is missing from the request")
        lines.append(f"{name}:{' '.join(value.split())}\n")
    return "".join(lines)


@lru_cache(maxsize=64)
def parse_amz_date(value: str) -> float:
    """Seconds since the epoch for an ISO8601 basic (``20130524T000000Z``) or HTTP date
    (cached: concurrent requests carry the same few dates)."""
    try:
        return calendar.timegm(time.strptime(value, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        pass
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        raise S3Error("AccessDenied", f"Unparseable request date {value!r}") from None


@lru_cache(maxsize=64)
def _iso_basic(value: str) -> str:
    """The ISO 8601 basic form (``20130524T000000Z``) of a request date (cached, as
    :func:`parse_amz_date` is)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(parse_amz_date(value)))


def _check_skew(amz_date: str, now: float) -> None:
    ts = parse_amz_date(amz_date)
    if ts < 0:
        raise S3Error("AccessDenied", f"Invalid date {amz_date!r}: before 1970")
    if abs(now - ts) > MAX_SKEW_SECONDS:
        raise S3Error(
            "RequestTimeTooSkewed",
            RequestTime=amz_date,
            ServerTime=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            MaxAllowedSkewMilliseconds=str(MAX_SKEW_SECONDS * 1000),
        )


def _parse_credential(credential: str, region: str) -> tuple[str, str, str]:
    parts = credential.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request":
        raise S3Error("AuthorizationHeaderMalformed", f"Malformed credential {credential!r}")
    access_key, date, cred_region, service, _ = parts
    if service != "s3":
        raise S3Error("AuthorizationHeaderMalformed", f"Credential service must be 's3', not {service!r}")
    return access_key, date, cred_region


def _lookup(users: dict, access_key: str) -> dict:
    user = users.get(access_key)
    if user is None:
        raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
    return user


def verify_request(method: str, raw_path: str, raw_query: str, headers: dict[str, str],
                   users: dict, region: str, now: float | None = None) -> AuthContext:
    """Check a request's SigV4 signature (header or presigned); return who signed it.

    ``headers`` has lowercase names. Raises :class:`S3Error` with ``AccessDenied``,
    ``InvalidAccessKeyId``, ``SignatureDoesNotMatch`` or ``RequestTimeTooSkewed``.
    """
    now = time.time() if now is None else now
    auth = headers.get("authorization")
    if auth:
        return _verify_header(method, raw_path, raw_query, headers, auth, users, region, now)
    if "X-Amz-Signature=" in raw_query:
        return _verify_presigned(method, raw_path, raw_query, headers, users, region, now)
    return ANONYMOUS


def _matching_sts(key: bytes, signature: str, amz_date: str, scope: str, creq: str) -> str | None:
    """The string to sign whose signature is ``signature``, or None. Header values arrive as
    bytes (read as latin-1): clients sign the bytes they send (UTF-8 for non-ASCII metadata),
    and some sign the UTF-8 of text they sent as latin-1; both are tried."""
    encodings = ("utf-8",) if creq.isascii() else ("latin-1", "utf-8")
    for encoding in encodings:
        sts = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(creq.encode(encoding)).hexdigest()])
        if hmac.compare_digest(hmac_hex(key, sts), signature):
            return sts
    return None


def _verify_header(method, raw_path, raw_query, headers, auth, users, region, now) -> AuthContext:
    algo, _, rest = auth.partition(" ")
    if algo != ALGORITHM:
        if algo == "AWS":
            raise S3Error("InvalidRequest", "Signature Version 2 is not supported; use AWS4-HMAC-SHA256")
        raise S3Error("AuthorizationHeaderMalformed", f"Unsupported authorization algorithm {algo!r}")
    fields = {}
    for item in rest.split(","):
        key, _, value = item.strip().partition("=")
        fields[key] = value
    try:
        credential, signed, signature = fields["Credential"], fields["SignedHeaders"], fields["Signature"]
    except KeyError as exc:
        raise S3Error("AuthorizationHeaderMalformed", f"Authorization header lacks {exc.args[0]}") from None
    access_key, date, cred_region = _parse_credential(credential, region)
    user = _lookup(users, access_key)
    amz_date = headers.get("x-amz-date") or headers.get("date")
    if not amz_date:
        raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
    _check_skew(amz_date, now)
    # signed with a Date header only: the string to sign carries that time in ISO 8601 basic form
    amz_date = _iso_basic(amz_date)
    payload_hash = headers.get("x-amz-content-sha256")
    if not payload_hash:
        raise S3Error("InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
    signed_list = signed.split(";")
    creq = "\n".join([method, raw_path, canonical_query(raw_query),
                      _canonical_headers(headers, signed_list), signed, payload_hash])
    scope = f"{date}/{cred_region}/s3/aws4_request"
    key = signing_key(user["secret_key"], date, cred_region, "s3")
    sts = _matching_sts(key, signature, amz_date, scope, creq)
    if sts is None:
        sts = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
        raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=sts,
                      CanonicalRequest=creq)
    return AuthContext(access_key, user.get("user", access_key), bool(user.get("admin")),
                       payload_hash, amz_date, scope, key, signature)


def _verify_presigned(method, raw_path, raw_query, headers, users, region, now) -> AuthContext:
    params = {}
    for part in raw_query.split("&"):
        name, _, value = part.partition("=")
        params[unquote(name)] = unquote(value)
    if params.get("X-Amz-Algorithm") != ALGORITHM:
        raise S3Error("AuthorizationQueryParametersError", "X-Amz-Algorithm must be AWS4-HMAC-SHA256")
    try:
        credential = params["X-Amz-Credential"]
        amz_date = params["X-Amz-Date"]
        expires = int(params["X-Amz-Expires"])
        signed = params["X-Amz-SignedHeaders"]
        signature = params["X-Amz-Signature"]
    except (KeyError, ValueError) as exc:
        raise S3Error("AuthorizationQueryParametersError", f"Presigned URL parameter problem: {exc}") from None
    if not 0 < expires <= MAX_PRESIGN_EXPIRES:
        # S3 refuses these with 403 (a presigned URL that can never be valid)
        raise S3Error("AccessDenied", "X-Amz-Expires must be between 1 and 604800 seconds (a week)",
                      Expires=str(expires))
    access_key, date, cred_region = _parse_credential(credential, region)
    user = _lookup(users, access_key)
    start = parse_amz_date(amz_date)
    if now > start + expires:
        raise S3Error("AccessDenied", "Request has expired", Expires=str(expires))
    if start - now > MAX_SKEW_SECONDS:
        raise S3Error("RequestTimeTooSkewed", RequestTime=amz_date)
    payload_hash = headers.get("x-amz-content-sha256") or UNSIGNED
    signed_list = signed.split(";")
    creq = "\n".join([method, raw_path, canonical_query(raw_query, skip="X-Amz-Signature"),
                      _canonical_headers(headers, signed_list), signed, UNSIGNED
                      if "x-amz-content-sha256" not in signed_list else payload_hash])
    scope = f"{date}/{cred_region}/s3/aws4_request"
    key = signing_key(user["secret_key"], date, cred_region, "s3")
    sts = _matching_sts(key, signature, amz_date, scope, creq)
    if sts is None:
        sts = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
        raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=sts,
                      CanonicalRequest=creq)
    return AuthContext(access_key, user.get("user", access_key), bool(user.get("admin")),
                       payload_hash, amz_date, scope, key, signature)


# an unsigned request: what it may do is up to bucket ACLs and policies (see .access)
ANONYMOUS = AuthContext("", "", False, UNSIGNED, "", "", b"", "")


def chunk_string_to_sign(ctx: AuthContext, previous: str, chunk_sha256: str) -> str:
    """String to sign for one chunk of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD body."""
    return "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", ctx.amz_date, ctx.scope, previous,
                      EMPTY_SHA256, chunk_sha256])


def trailer_string_to_sign(ctx: AuthContext, previous: str, trailer_sha256: str) -> str:
    """String to sign for the trailing headers of a signed aws-chunked body."""
    return "\n".join(["AWS4-HMAC-SHA256-TRAILER", ctx.amz_date, ctx.scope, previous, trailer_sha256])
