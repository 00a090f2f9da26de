"""SSE-C: the customer-provided key a request carries in its headers, checked as S3 checks it
(algorithm, length, MD5). The key itself is never stored; see :mod:`.data_keys` for how a
later request proves it has the same one."""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from ..errors import ERROR_CODES, S3Error
from .keys import b64

CUSTOMER = "x-amz-server-side-encryption-customer-"
COPY_CUSTOMER = "x-amz-copy-source-server-side-encryption-customer-"

ERROR_CODES.update({
    "InvalidEncryptionAlgorithmError": (400, "The encryption request you specified is not valid. "
                                             "The valid value is AES256."),
})


@dataclass
class CustomerKey:
    """An SSE-C key from request headers (checked against its MD5)."""

    key: bytes
    md5: str


def customer_key(headers: dict[str, str], prefix: str = CUSTOMER) -> CustomerKey | None:
    """The SSE-C key a request carries (``prefix``: the copy-source headers for a copy's
    source), with S3's errors for incomplete or inconsistent headers; None without any."""
    alg, key, md5 = headers.get(prefix + "algorithm"), headers.get(prefix + "key"), headers.get(prefix + "key-md5")
    if alg is None and key is None and md5 is None:
        return None
    if alg is None:
        raise S3Error("InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys "
                      "must provide a valid encryption algorithm.", ArgumentName=prefix + "algorithm")
    if alg != "AES256":
        raise S3Error("InvalidEncryptionAlgorithmError", ArgumentName=prefix + "algorithm", ArgumentValue=alg)
    if key is None:
        raise S3Error("InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys "
                      "must provide an appropriate secret key.", ArgumentName=prefix + "key")
    try:
        raw = base64.b64decode(key, validate=True)
    except binascii.Error:
        raw = b""
    if len(raw) != 32:
        raise S3Error("InvalidArgument", "The secret key was invalid for the specified algorithm.",
                      ArgumentName=prefix + "key")
    if md5 is None:
        raise S3Error("InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys "
                      "must provide the client calculated MD5 of the secret key.", ArgumentName=prefix + "key-MD5")
    if not hmac.compare_digest(md5.encode(), b64(hashlib.md5(raw).digest()).encode()):
        raise S3Error("InvalidArgument", "The calculated MD5 hash of the key did not match the hash that was provided.",
                      ArgumentName=prefix + "key-MD5")
    return CustomerKey(raw, md5)
