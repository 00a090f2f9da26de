"""POST Object: browser form uploads (``multipart/form-data`` to the bucket URL).

The form carries its own credentials: a base64 policy document (expiration and conditions)
signed with SigV4 (``x-amz-algorithm``, ``x-amz-credential``, ``x-amz-date``,
``x-amz-signature``) or SigV2 (``AWSAccessKeyId``, ``signature``); a form without them is
anonymous and needs a bucket ACL or policy that lets anyone write. Conditions: exact matches
(``{"field": "value"}`` or ``["eq", "$field", "value"]``), ``["starts-with", "$field",
"prefix"]`` and ``["content-length-range", min, max]``; every field sent must be covered by
one (except the signature fields, ``file``, ``policy`` and ``x-ignore-*``), as S3 requires.
Answers: 204 by default, ``success_action_status`` 200 or 201 (with a PostResponse
document), or a 303 to ``success_action_redirect``.
"""
from __future__ import annotations

import base64
import binascii
import hmac
import json
import time
from datetime import datetime, timezone
from typing import AsyncIterator
from urllib.parse import quote, urlencode

from . import access, objectlock, sigv2, sse
from .errors import ERROR_CODES, S3Error, el, parse_xml, xml_doc
from .index import Op
from .object_ops import meta_from_headers
from .request import Request, Response, xml_response
from .sigv4 import ALGORITHM, AuthContext, hmac_hex, signing_key

ERROR_CODES.update({
    "InvalidPolicyDocument": (400, "The content of the form does not meet the conditions specified in the "
                                   "policy document."),
    "MalformedPOSTRequest": (400, "The body of your POST request is not well-formed multipart/form-data."),
    "MaxPostPreDataLengthExceededError": (400, "Your POST request fields preceding the upload file were too "
                                               "large."),
})

MAX_POST_BYTES = 256 * 1024 * 1024  # the form is held in memory while it is parsed
MAX_FIELDS_BYTES = 20 * 1024        # S3's limit on the fields before the file
EXEMPT = {"policy", "file", "x-amz-signature", "signature", "awsaccesskeyid"}
SIGNATURE_FIELDS = {"x-amz-signature", "signature", "awsaccesskeyid"}
HEADER_FIELDS = {"content-type", "cache-control", "content-disposition", "content-encoding", "expires"}


class FormBody:
    """The uploaded file as the body :meth:`Gateway.store_body` reads."""

    def __init__(self, data: bytes):
        self.data = data
        self.size = len(data)
        self.trailers: dict[str, str] = {}
        self.payload_hash = None

    async def read_all(self, limit: int) -> bytes:
        return self.data

    async def stream(self) -> AsyncIterator[bytes]:
        view = memoryview(self.data)
        for i in range(0, len(view), 1024 * 1024):
            yield bytes(view[i:i + 1024 * 1024])


def parse_form(content_type: str, body: bytes) -> tuple[dict[str, str], bytes | None, str]:
    """(fields by lowercased name, file bytes, file name) of a multipart/form-data body;
    fields after the file are ignored, as S3 does."""
    boundary = None
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary":
            boundary = value.strip('"')
    if not boundary:
        raise S3Error("MalformedPOSTRequest", "The Content-Type lacks a multipart boundary")
    delimiter = b"--" + boundary.encode("latin-1")
    chunks = body.split(delimiter)
    if len(chunks) < 3:
        raise S3Error("MalformedPOSTRequest")
    fields: dict[str, str] = {}
    for chunk in chunks[1:-1]:
        if chunk.startswith(b"\r\n"):
            chunk = chunk[2:]
        head, sep, content = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise S3Error("MalformedPOSTRequest", "A form part lacks its headers")
        if content.endswith(b"\r\n"):
            content = content[:-2]
        name = filename = None
        for line in head.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            if key.strip().lower() != "content-disposition":
                continue
            for param in value.split(";")[1:]:
                pname, _, pvalue = param.strip().partition("=")
                pvalue = pvalue.strip().strip('"')
                if pname.lower() == "name":
                    name = pvalue
                elif pname.lower() == "filename":
                    filename = pvalue
        if name is None:
            raise S3Error("MalformedPOSTRequest", "A form part has no name")
        if name.lower() == "file":
            return fields, content, filename or ""
        if sum(len(v) for v in fields.values()) > MAX_FIELDS_BYTES:
            raise S3Error("MaxPostPreDataLengthExceededError", "Your POST request fields preceding the "
                          "upload file were too large.")
        fields[name.lower()] = content.decode("utf-8", "replace")
    return fields, None, ""


def _policy_error(message: str) -> S3Error:
    return S3Error("AccessDenied", f"Invalid according to Policy: {message}")


def _parse_expiration(value) -> float:
    if not isinstance(value, str):
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: Invalid 'expiration' value")
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    raise S3Error("InvalidPolicyDocument", f"Invalid Policy: Invalid 'expiration' value: '{value}'")


def _conditions(doc) -> list:
    if not isinstance(doc, dict):
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: the policy must be a JSON object")
    if "expiration" not in doc:
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: Policy missing expiration.")
    if "conditions" not in doc:
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: Policy missing conditions.")
    expires = _parse_expiration(doc["expiration"])
    if time.time() > expires:
        raise _policy_error("Policy expired.")
    conditions = doc["conditions"]
    if not isinstance(conditions, list):
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: 'conditions' must be a list")
    out = []  # (op, field, value) with op eq / starts-with / range
    for cond in conditions:
        if isinstance(cond, dict):
            if len(cond) != 1:
                raise S3Error("InvalidPolicyDocument", "Invalid Policy: Invalid Simple-Condition: Simple-Conditions "
                              "must have exactly one property specified.")
            (field, value), = cond.items()
            if not isinstance(value, str):
                raise S3Error("InvalidPolicyDocument", f"Invalid Policy: Invalid Simple-Condition: value of "
                              f"{field} must be a string")
            out.append(("eq", field.lower().lstrip("$"), value))
        elif isinstance(cond, list) and cond:
            op = str(cond[0]).lower()
            if op == "content-length-range":
                if len(cond) != 3:
                    raise S3Error("InvalidPolicyDocument", "Invalid Policy: Invalid content-length-range "
                                  "condition: it takes a minimum and a maximum")
                try:
                    low, high = int(cond[1]), int(cond[2])
                except (TypeError, ValueError):
                    raise S3Error("InvalidPolicyDocument", "Invalid Policy: Invalid content-length-range "
                                  "bounds") from None
                if low < 0 or high < 0:
                    raise S3Error("InvalidPolicyDocument", "Invalid Policy: content-length-range bounds "
                                  "must not be negative")
                out.append(("range", low, high))
            elif op in ("eq", "starts-with") and len(cond) == 3 and isinstance(cond[1], str) \
                    and cond[1].startswith("$") and isinstance(cond[2], str):
                out.append((op, cond[1][1:].lower(), cond[2]))
            else:
                raise S3Error("InvalidPolicyDocument", f"Invalid Policy: Invalid condition {json.dumps(cond)}")
        else:
            raise S3Error("InvalidPolicyDocument", f"Invalid Policy: Invalid condition {json.dumps(cond)}")
    return out


def check_policy(policy_b64: str, fields: dict[str, str], bucket: str, size: int) -> None:
    """Refuse the upload unless the (already authenticated) policy allows exactly this form."""
    try:
        doc = json.loads(base64.b64decode(policy_b64, validate=False))
    except (ValueError, binascii.Error):
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: Invalid JSON.") from None
    values = dict(fields, bucket=bucket)
    covered = set()
    for op, field, value in _conditions(doc):
        if op == "range":
            if size > value:
                raise S3Error("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size",
                              ProposedSize=str(size), MaxSizeAllowed=str(value))
            if size < field:
                raise S3Error("EntityTooSmall", "Your proposed upload is smaller than the minimum allowed size",
                              ProposedSize=str(size), MinSizeAllowed=str(field))
            continue
        covered.add(field)
        got = values.get(field)
        if got is None and op == "starts-with" and value == "":
            continue  # "any value" also allows leaving the field out (S3)
        if got is None:
            raise _policy_error(f'Policy Condition failed: ["{op}", "${field}", "{value}"]')
        if op == "eq" and got != value:
            raise _policy_error(f'Policy Condition failed: ["eq", "${field}", "{value}"]')
        if op == "starts-with":
            parts = got.split(",") if field == "content-type" else [got]
            if not all(p.strip().startswith(value) for p in parts):
                raise _policy_error(f'Policy Condition failed: ["starts-with", "${field}", "{value}"]')
    extra = sorted(f for f in values if f not in covered and f not in EXEMPT and not f.startswith("x-ignore-"))
    if extra:
        raise _policy_error("Extra input fields: " + ", ".join(extra))


def authenticate_form(fields: dict[str, str], config: dict) -> AuthContext | None:
    """The signer of a form (None when it carries no signature); S3Error when it is wrong."""
    users = config["users"]
    policy_b64 = fields.get("policy")
    if "x-amz-signature" in fields or "x-amz-algorithm" in fields or "x-amz-credential" in fields:
        for name in ("x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature", "policy"):
            if not fields.get(name):
                raise S3Error("InvalidArgument", f"Bucket POST must contain a field named '{name}'. If it is "
                              "specified, please check the order of the fields.", ArgumentName=name)
        if fields["x-amz-algorithm"] != ALGORITHM:
            raise S3Error("InvalidArgument", "Only AWS4-HMAC-SHA256 is supported", ArgumentName="x-amz-algorithm")
        parts = fields["x-amz-credential"].split("/")
        if len(parts) != 5 or parts[3] != "s3" or parts[4] != "aws4_request":
            raise S3Error("InvalidArgument", f"Malformed credential {fields['x-amz-credential']!r}",
                          ArgumentName="x-amz-credential")
        access_key, date, region = parts[0], parts[1], parts[2]
        user = users.get(access_key)
        if user is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
        key = signing_key(user["secret_key"], date, region, "s3")
        if not hmac.compare_digest(hmac_hex(key, policy_b64), fields["x-amz-signature"]):
            raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=policy_b64)
    elif "awsaccesskeyid" in fields or "signature" in fields:
        for name, label in (("awsaccesskeyid", "AWSAccessKeyId"), ("signature", "Signature"),
                            ("policy", "Policy")):
            if not fields.get(name):
                raise S3Error("InvalidArgument", f"Bucket POST must contain a field named '{label}'. If it is "
                              "specified, please check the order of the fields.", ArgumentName=label)
        access_key = fields["awsaccesskeyid"]
        user = users.get(access_key)
        if user is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
        if not hmac.compare_digest(sigv2.sign(user["secret_key"], policy_b64), fields["signature"]):
            raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=policy_b64)
    else:
        return None
    return AuthContext(access_key, user.get("user", access_key), bool(user.get("admin")), "UNSIGNED-PAYLOAD",
                       "", "", b"", "")


async def post_object(gw, req: Request, bucket: None = None) -> Response:
    """Handle one form upload into ``req.bucket``."""
    body = req.body()
    if body.size is None:
        raise S3Error("MissingContentLength")
    if body.size > MAX_POST_BYTES:
        raise S3Error("EntityTooLarge", f"Form uploads are limited to {MAX_POST_BYTES} bytes here; "
                      "use PutObject or a multipart upload for more")
    fields, data, filename = parse_form(req.headers.get("content-type", ""), await body.read_all(MAX_POST_BYTES))
    if data is None:
        raise S3Error("InvalidArgument", "POST requires exactly one file upload per request.",
                      ArgumentName="file", ArgumentValue="0")
    if "key" not in fields:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'key'.  If it is specified, "
                      "please check the order of the fields.", ArgumentName="key")
    signer = authenticate_form(fields, gw.config)
    key = fields["key"].replace("${filename}", filename)
    if signer is not None:
        # the key's conditions may name it as sent or as stored (${filename} replaced)
        try:
            check_policy(fields["policy"], fields, req.bucket, len(data))
        except S3Error:
            if key == fields["key"]:
                raise
            check_policy(fields["policy"], {**fields, "key": key}, req.bucket, len(data))
        req.auth = signer
    elif "policy" in fields:
        raise S3Error("InvalidArgument", "Bucket POST must contain a field named 'AWSAccessKeyId'.  If it is "
                      "specified, please check the order of the fields.", ArgumentName="AWSAccessKeyId")
    if not key:
        raise S3Error("InvalidArgument", "User key must have a length greater than 0.", ArgumentName="key")
    req.key = key
    req.method = "PUT"
    bucket = access.authorize(gw, req, "s3:PutObject")  # for the signer, or anonymous
    headers = {name: value for name, value in fields.items()
               if name in HEADER_FIELDS or name.startswith(("x-amz-meta-", "x-amz-server-side-encryption"))}
    if "acl" in fields:
        headers["x-amz-acl"] = fields["acl"]
    if "x-amz-storage-class" in fields:
        headers["x-amz-storage-class"] = fields["x-amz-storage-class"]
    if "tagging" in fields:
        headers["x-amz-tagging"] = _tagging_query(fields["tagging"])
    sub = Request("PUT", req.raw_path, "", headers, {}, bucket=bucket.name, key=key, auth=req.auth,
                  request_id=req.request_id, client=req.client, scheme=req.scheme)
    meta = access.new_object_acl(gw, sub, bucket, meta_from_headers(headers))
    meta.update(objectlock.for_new_version(bucket, headers))
    bucket.check_quota(len(data))
    wk = sse.for_write(gw.keyring, headers, bucket)   # the form's SSE fields, or the bucket's default
    cipher = wk.cipher() if wk else None
    stored = await gw.store_body(bucket, FormBody(data), headers, cipher=cipher)
    meta["ck"] = stored.checksums
    if wk:
        meta["sse"] = wk.meta(cipher.np)
    rec = gw.make_record(bucket, key, stored, sse.etag_for(wk, stored.md5_hex), meta)
    await gw.commit(bucket, Op("put", rec, versioned=bucket.versioning == "Enabled"), stored.in_segment)
    etag = f'"{rec.etag}"'
    host = req.headers.get("host", "")
    path = f"/{quote(key)}" if host.startswith(bucket.name + ".") else f"/{bucket.name}/{quote(key)}"
    out = {"etag": etag, "location": f"{req.scheme}://{host}{path}", **(wk.headers() if wk else {})}
    if bucket.versioning == "Enabled":  # not the null version a suspended bucket writes
        out["x-amz-version-id"] = rec.version_id
    redirect = fields.get("success_action_redirect") or fields.get("redirect")
    if redirect:
        sep = "&" if "?" in redirect else "?"
        out["location"] = redirect + sep + urlencode({"bucket": bucket.name, "key": key, "etag": etag})
        return Response(303, out)
    status = fields.get("success_action_status", "204")
    if status == "201":
        return xml_response(xml_doc("PostResponse", el("Location", out["location"]) + el("Bucket", bucket.name)
                                    + el("Key", key) + el("ETag", etag), namespace=False), 201, out)
    return Response(200 if status == "200" else 204, out)


def _tagging_query(xml_text: str) -> str:
    """The x-amz-tagging header form of a form's ``tagging`` field (a Tagging document)."""
    root = parse_xml(xml_text.encode())
    pairs = [(t.findtext("Key") or "", t.findtext("Value") or "") for t in root.iter("Tag")]
    return urlencode(pairs)

