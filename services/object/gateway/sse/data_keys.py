"""Each object's data key (a random 256-bit key per object; every part of a multipart upload
shares its upload's): chosen for a write from the request's SSE headers or the bucket's
default encryption, kept wrapped in ``meta["sse"]``, unwrapped for a read (SSE-C: with the
customer's key, which proves it is the same one), and the response headers that describe it."""
from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import S3Error
from .cipher import ChunkCipher
from .customer import CUSTOMER, CustomerKey, customer_key
from .keys import DEFAULT_KMS_KEY, Keyring, b64, unwrap_key, wrap_key

SSE_HEADER = "x-amz-server-side-encryption"
KMS_KEY_HEADER = "x-amz-server-side-encryption-aws-kms-key-id"
BUCKET_KEY_HEADER = "x-amz-server-side-encryption-bucket-key-enabled"


@dataclass
class WriteKey:
    """How a new object (or upload) is encrypted: its mode, data key and stored metadata."""

    mode: str                 # "AES256", "aws:kms" or "SSE-C"
    dek: bytes
    wrapped: str
    kms_id: str = ""
    bucket_key: bool = False
    customer_md5: str = ""
    kms_arn: str = ""         # what the response headers name the KMS key by
    extra: dict = field(default_factory=dict)

    def cipher(self) -> ChunkCipher:
        """A cipher for one piece (a fresh nonce prefix)."""
        return ChunkCipher(self.dek)

    def meta(self, nonce_prefixes: list[bytes] | bytes) -> dict:
        """What the version's metadata keeps (``meta["sse"]``)."""
        info = {"m": self.mode, "wk": self.wrapped}
        if isinstance(nonce_prefixes, bytes):
            info["np"] = b64(nonce_prefixes)
        else:
            info["nps"] = [b64(n) for n in nonce_prefixes]
        if self.kms_id:
            info["kid"] = self.kms_id
        if self.bucket_key:
            info["bk"] = True
        return info

    def upload_info(self) -> dict:
        """What an upload in progress keeps (no nonce yet: each part brings its own)."""
        return self.meta([])

    def headers(self) -> dict[str, str]:
        """The response headers S3 sends for an object written this way."""
        out = headers_for({"m": self.mode, "kid": self.kms_id, "bk": self.bucket_key}, self.customer_md5)
        if self.kms_arn:
            out[KMS_KEY_HEADER] = self.kms_arn
        return out


def headers_for(info: dict | None, customer_md5: str = "", keyring: Keyring | None = None) -> dict[str, str]:
    """Response headers describing an object's encryption (``info``: ``meta["sse"]``); with
    ``keyring``, a KMS key is named by its ARN, as S3 does."""
    if not info:
        return {}
    if info["m"] == "SSE-C":
        out = {CUSTOMER + "algorithm": "AES256"}
        if customer_md5:
            out[CUSTOMER + "key-md5"] = customer_md5
        return out
    out = {SSE_HEADER: info["m"]}
    if info["m"] == "aws:kms":
        kid = info.get("kid") or DEFAULT_KMS_KEY
        out[KMS_KEY_HEADER] = keyring.key_arn(kid) if keyring else kid
    if info.get("bk"):
        out[BUCKET_KEY_HEADER] = "true"
    return out


def _new_key(keyring: Keyring, mode: str, kms_id: str = "", ckey: CustomerKey | None = None,
             bucket_key: bool = False) -> WriteKey:
    dek = os.urandom(32)
    if mode == "SSE-C":
        wrapped = wrap_key(AESGCM(ckey.key), dek, b"sse-c")
        return WriteKey(mode, dek, wrapped, customer_md5=ckey.md5)
    if mode == "aws:kms":
        wrapped = wrap_key(keyring.kms_kek(kms_id), dek, b"kms:" + kms_id.encode())
        return WriteKey(mode, dek, wrapped, kms_id=kms_id, bucket_key=bucket_key, kms_arn=keyring.key_arn(kms_id))
    wrapped = wrap_key(keyring.kek(b"sse-s3"), dek, b"sse-s3")
    return WriteKey(mode, dek, wrapped, bucket_key=bucket_key)


def requested(headers: dict[str, str]) -> bool:
    """Whether a request asks for an encryption of its own (a copy onto itself may)."""
    return SSE_HEADER in headers or (CUSTOMER + "algorithm") in headers


def for_write(keyring: Keyring, headers: dict[str, str], bucket) -> WriteKey | None:
    """The encryption of an object a PUT, copy or CreateMultipartUpload writes: the request's
    SSE headers, else the bucket's default encryption, else none."""
    ckey = customer_key(headers)
    mode = headers.get(SSE_HEADER)
    kms_given = headers.get(KMS_KEY_HEADER)
    bucket_key = (headers.get(BUCKET_KEY_HEADER) or "").lower() == "true"
    if ckey is not None:
        if mode is not None:
            raise S3Error("InvalidArgument", "Server Side Encryption with Customer provided key is incompatible "
                          "with the encryption method specified", ArgumentName=SSE_HEADER, ArgumentValue=mode)
        return _new_key(keyring, "SSE-C", ckey=ckey)
    if mode is None:
        if kms_given is not None:
            raise S3Error("InvalidArgument", "Server Side Encryption with AWS KMS managed key requires HTTP header "
                          "x-amz-server-side-encryption : aws:kms", ArgumentName=KMS_KEY_HEADER)
        default = (bucket.settings.get("encryption") or {}) if bucket is not None else {}
        if not default:
            return None
        mode, kms_given, bucket_key = default["alg"], default.get("kid"), bool(default.get("bk"))
    if mode == "AES256":
        if kms_given is not None and SSE_HEADER in headers:
            raise S3Error("InvalidArgument", "Server Side Encryption with AWS KMS managed key requires HTTP header "
                          "x-amz-server-side-encryption : aws:kms", ArgumentName=KMS_KEY_HEADER)
        return _new_key(keyring, "AES256", bucket_key=bucket_key)
    if mode == "aws:kms":
        return _new_key(keyring, "aws:kms", kms_id=keyring.kms_id(kms_given), bucket_key=bucket_key)
    raise S3Error("InvalidArgument", "The encryption method specified is not supported",
                  ArgumentName=SSE_HEADER, ArgumentValue=mode)


def same_as(keyring: Keyring, info: dict | None) -> WriteKey | None:
    """A new key of the same kind as ``info`` (copies the gateway makes itself, such as a
    snapshot restore); SSE-C objects cannot be copied without their customer's key."""
    if not info:
        return None
    if info["m"] == "SSE-C":
        raise S3Error("InvalidRequest", "An object encrypted with a customer-provided key (SSE-C) cannot be "
                      "copied without that key")
    return _new_key(keyring, info["m"], kms_id=info.get("kid", ""), bucket_key=bool(info.get("bk")))


def etag_for(wk: WriteKey | None, md5_hex: str) -> str:
    """An object's ETag: the MD5 of its body, except under SSE-C, where S3's ETag is no MD5
    of the plaintext (so that the index holds no digest of a customer's data)."""
    if wk is None or wk.mode != "SSE-C":
        return md5_hex
    return hmac.new(wk.dek, bytes.fromhex(md5_hex), hashlib.md5).hexdigest()


def data_key(keyring: Keyring, info: dict, ckey: CustomerKey | None) -> bytes:
    """Unwrap a stored version's data key (SSE-C needs the customer's key: ``AccessDenied``
    when it is not the one the object was written with)."""
    mode = info["m"]
    try:
        if mode == "SSE-C":
            if ckey is None:
                raise S3Error("InvalidRequest", "The object was stored using a form of Server Side Encryption. "
                              "The correct parameters must be provided to retrieve the object.")
            return unwrap_key(AESGCM(ckey.key), info["wk"], b"sse-c")
        if mode == "aws:kms":
            kid = info.get("kid") or DEFAULT_KMS_KEY
            return unwrap_key(keyring.kms_kek(kid), info["wk"], b"kms:" + kid.encode())
        return unwrap_key(keyring.kek(b"sse-s3"), info["wk"], b"sse-s3")
    except InvalidTag:
        if mode == "SSE-C":
            raise S3Error("AccessDenied", "The provided customer key does not match the key the object was "
                          "encrypted with") from None
        raise S3Error("InternalError", "The object's data key cannot be unwrapped: the appliance's master key "
                      "is not the one it was written with") from None


def refuse_on_read(headers: dict[str, str]) -> None:
    """GET and HEAD take no SSE-S3 / SSE-KMS request headers (the object says how it is
    encrypted): S3 answers 400 ``InvalidArgument`` to them."""
    for name in (SSE_HEADER, KMS_KEY_HEADER):
        if name in headers:
            raise S3Error("InvalidArgument", f"{name} header is not supported for this operation.",
                          ArgumentName=name, ArgumentValue=headers[name])


def check_read(keyring: Keyring, meta: dict, headers: dict[str, str], prefix: str = CUSTOMER) -> CustomerKey | None:
    """The customer key a read of this version must carry (and carries), with S3's errors:
    SSE-C parameters on an object that is not SSE-C are refused too."""
    ckey = customer_key(headers, prefix)
    info = meta.get("sse")
    if info is None or info["m"] != "SSE-C":
        if ckey is not None:
            raise S3Error("InvalidRequest", "The encryption parameters are not applicable to this object.")
        return None
    data_key(keyring, info, ckey)   # raises unless it is the right key
    return ckey


def for_upload(keyring: Keyring, info: dict | None, headers: dict[str, str]) -> WriteKey | None:
    """The key of a multipart upload in progress (``info``: what CreateMultipartUpload kept),
    for UploadPart and UploadPartCopy: an SSE-C upload needs its customer key on every part."""
    ckey = check_read(keyring, {"sse": info} if info else {}, headers)
    if not info:
        return None
    return WriteKey(info["m"], data_key(keyring, info, ckey), info["wk"], kms_id=info.get("kid", ""),
                    bucket_key=bool(info.get("bk")), customer_md5=ckey.md5 if ckey else "",
                    kms_arn=keyring.key_arn(info["kid"]) if info.get("kid") else "")


def completed_meta(info: dict | None, nonce_prefixes: list[str]) -> dict | None:
    """``meta["sse"]`` of a completed multipart object (its parts' nonce prefixes, in order)."""
    if not info:
        return None
    return {**info, "nps": list(nonce_prefixes)}


def describe(info: dict | None) -> dict | None:
    """What the response headers need of ``meta["sse"]`` (no key material)."""
    return {k: v for k, v in info.items() if k in ("m", "kid", "bk")} if info else None
