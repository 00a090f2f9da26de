"""The keys that wrap objects' data keys: the appliance's master key and its KMS keys (from
the gateway's config), each key-encryption key derived from them with HKDF-SHA256, and the
wrapping itself (AES-256-GCM with a purpose as associated data)."""
from __future__ import annotations

import base64
import binascii
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..errors import ERROR_CODES, S3Error

DEFAULT_KMS_KEY = "aws/s3"
KMS_ACCOUNT = "000000000000"   # the account part of key ARNs, as the plane's (models.KMS_ACCOUNT)

ERROR_CODES.update({
    "KMS.NotFoundException": (400, "Invalid keyId"),
    "KMS.DisabledException": (400, "The request was rejected because the specified KMS key is not enabled."),
})


def b64(data: bytes) -> str:
    """Base64 text of ``data`` (how keys and nonces are kept in JSON)."""
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    """The bytes of :func:`b64`'s text."""
    return base64.b64decode(text)


class Keyring:
    """The appliance's master key and KMS keys, from the gateway config (rebuilt when the
    config file changes, so a key the plane creates or disables counts from the next request)."""

    def __init__(self, config: dict):
        self.master = _key_bytes(config.get("sse_master_key"))
        self.region = config.get("region") or "us-east-1"
        kms = config.get("kms_keys") or []
        # id -> (material or None: derived from the master key, enabled, ARN)
        self.kms: dict[str, tuple[bytes | None, bool, str]] = {DEFAULT_KMS_KEY: (None, True, "")}
        self.aliases: dict[str, str] = {}
        for kid in kms if isinstance(kms, list) else ():
            self.kms[str(kid)] = (None, True, "")
        for kid, spec in kms.items() if isinstance(kms, dict) else ():
            material = _key_bytes(spec.get("material"))
            if material is None:
                continue  # unreadable material: the key is unknown rather than wrongly derived
            self.kms[kid] = (material, bool(spec.get("enabled", True)), spec.get("arn") or "")
            for alias in spec.get("aliases") or ():
                self.aliases[alias] = kid
        self._keks: dict[bytes, AESGCM] = {}

    def kek(self, purpose: bytes, material: bytes | None = None) -> AESGCM:
        """The key-encryption key for ``purpose`` (derived from ``material``, by default the
        master key)."""
        if material is None and self.master is None:
            raise S3Error("InvalidRequest", "Server-side encryption is not available: this gateway has no "
                          "master key (sse_master_key) in its configuration")
        aes = self._keks.get(purpose)
        if aes is None:
            key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                       info=b"strata-sse:" + purpose).derive(material or self.master)
            aes = self._keks[purpose] = AESGCM(key)
        return aes

    def kms_id(self, given: str | None) -> str:
        """The appliance KMS key a request names (a bare id, ``alias/NAME`` or an ARN ending
        in ``key/ID`` or ``alias/NAME``); ``KMS.NotFoundException`` for any other."""
        if not given:
            return DEFAULT_KMS_KEY
        candidates = [given]
        if given.startswith("arn:"):
            tail = given.split(":", 5)[-1]
            candidates.append(tail)
            if tail.startswith("key/"):
                candidates.append(tail[4:])
        for c in candidates:
            if c in self.kms:
                return c
            if c in self.aliases:
                return self.aliases[c]
        raise S3Error("KMS.NotFoundException", f"Invalid keyId '{given}'")

    def key_arn(self, kid: str) -> str:
        """The ARN of KMS key ``kid`` (what S3 reports as SSEKMSKeyId): the one the config
        gives, else ``arn:aws:kms:REGION:ACCOUNT:key/ID``."""
        spec = self.kms.get(kid)
        return (spec[2] if spec else "") or f"arn:aws:kms:{self.region}:{KMS_ACCOUNT}:key/{kid}"

    def kms_kek(self, kid: str) -> AESGCM:
        """The key-encryption key of KMS key ``kid`` (``KMS.DisabledException`` while the key
        is disabled, ``KMS.NotFoundException`` once it is gone from the config)."""
        spec = self.kms.get(kid)
        if spec is None:
            raise S3Error("KMS.NotFoundException", f"Invalid keyId '{kid}'")
        material, enabled, arn = spec
        if not enabled:
            raise S3Error("KMS.DisabledException", f"{arn or kid} is disabled.")
        return self.kek(b"kms:" + kid.encode(), material)


def _key_bytes(text) -> bytes | None:
    """32 key bytes from base64 text (None when absent or not such)."""
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) and text else None
    except binascii.Error:
        return None
    return raw if raw is not None and len(raw) == 32 else None


def wrap_key(aes: AESGCM, dek: bytes, aad: bytes) -> str:
    """``dek`` sealed under ``aes`` (a random nonce first), as base64 text."""
    nonce = os.urandom(12)
    return b64(nonce + aes.encrypt(nonce, dek, aad))


def unwrap_key(aes: AESGCM, wrapped: str, aad: bytes) -> bytes:
    """The data key :func:`wrap_key` sealed (``InvalidTag`` under another key or purpose)."""
    raw = unb64(wrapped)
    return aes.decrypt(raw[:12], raw[12:], aad)
