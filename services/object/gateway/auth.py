"""Who sent a request: SigV4 (header or presigned), SigV2 (header or presigned), or nobody.

An unsigned request is anonymous (``sigv4.ANONYMOUS``); what it may do is decided by
the bucket's ACLs and policy (:mod:`.access`).
"""
from __future__ import annotations

from . import sigv2
from .errors import S3Error
from .sigv4 import AuthContext, verify_request


def _sigv2_resource(req, domains: list) -> str:
    """SigV2 signs ``/bucket/key`` even when the bucket came in the Host header."""
    host = req.headers.get("host", "")
    hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if req.bucket and any(hostname.endswith("." + d) for d in domains):
        return f"/{req.bucket}{req.raw_path}"
    return req.raw_path


# query parameters of a presigned URL that carry its signature, not request headers
PRESIGN_PARAMS = {"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-expires", "x-amz-signedheaders",
                  "x-amz-signature", "x-amz-security-token"}


def authenticate(req, config: dict) -> AuthContext:
    """The signer of ``req`` (ANONYMOUS when unsigned); S3Error when a signature is wrong.
    The x-amz-* parameters of a presigned URL (x-amz-acl, ...) then count as its headers."""
    ctx = _verify(req, config)
    if req.query and "authorization" not in req.headers:
        for name, value in req.query.items():
            low = name.lower()
            if low.startswith("x-amz-") and low not in PRESIGN_PARAMS and low not in req.headers:
                req.headers[low] = value
    return ctx


def _verify(req, config: dict) -> AuthContext:
    header = req.headers.get("authorization")
    users = config["users"]
    if header is not None and not header.strip():
        raise S3Error("AccessDenied", "The Authorization header is empty")
    if header and header.startswith("AWS "):
        return sigv2.verify_header(req.method, _sigv2_resource(req, config.get("domains", ["localhost"])),
                                   req.raw_query, req.headers, header, users)
    if not header and "Signature=" in req.raw_query and "AWSAccessKeyId=" in req.raw_query \
            and "X-Amz-Signature=" not in req.raw_query:
        return sigv2.verify_query(req.method, _sigv2_resource(req, config.get("domains", ["localhost"])),
                                  req.raw_query, req.headers, users)
    return verify_request(req.method, req.raw_path, req.raw_query, req.headers, users, config["region"])
