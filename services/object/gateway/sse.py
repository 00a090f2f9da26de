"""Server-side encryption at rest: SSE-S3 (``AES256``), SSE-KMS with keys kept by the
appliance (``aws:kms``), SSE-C (customer-provided keys), and bucket default encryption.

Keys. Every object (every part of a multipart upload shares its upload's key) is encrypted
with its own random 256-bit data key. The data key is stored only wrapped (AES-256-GCM,
in the version's index metadata ``meta["sse"]["wk"]``):

- SSE-S3: by a key derived (HKDF-SHA256) from the appliance's master key, which the plane
  generates at first start, keeps sealed in its database and writes into the gateway's
  config file (``sse_master_key``, mode 0600, outside ``data_root``); it is never logged.
- SSE-KMS: by a key derived from the KMS key's own material (the keys the plane manages:
  random 256 bits each, sealed in its database, given to the gateway in its 0600 config as
  ``kms_keys: {id: {"material", "enabled", "aliases", "arn"}}``), or from the master key and
  the id (``aws/s3``, the default when a request names none, and ids listed as
  ``kms_keys: [id, ...]``). A request may name a key by id, ``alias/NAME`` or ARN; another
  is refused with ``KMS.NotFoundException``, a disabled key (new objects and reads of its
  objects alike) with ``KMS.DisabledException``, both 400 as S3 answers them.
- SSE-C: by the customer's key itself, which is never stored: a later request proves it has
  the same key by unwrapping the data key (the GCM tag fails otherwise: ``AccessDenied``),
  as S3 proves it with a salted HMAC of the key.

Cipher layout (DARE-like): the plaintext of a piece (an object, or one multipart part) is cut
into packages of 64 KiB; package ``i`` is sealed with AES-256-GCM under nonce
``np || i`` (``np``: 8 random bytes per piece, recorded in the metadata; 4-byte big-endian
package counter) and stored as ciphertext followed by its 16-byte tag. A range GET reads
and opens only the packages it overlaps (package ``i`` starts at ``i * (64 KiB + 16)``), and
every byte returned has been authenticated: a flipped bit on disk fails the read instead of
returning wrong data. AES-CTR plus a MAC would keep lengths equal but would need a MAC per
range-readable block stored somewhere else; GCM packages keep each tag beside its data.
Random nonce prefixes (not derived from part numbers) matter because a part can be uploaded
again under the same number with the same data key. Small objects (in segments) and large
ones (their own files, or one file per part) use the same layout.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import AsyncIterator, Iterator

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import ERROR_CODES, S3Error, child_text, el, parse_xml, xml_doc

CHUNK = 64 * 1024
TAG = 16
PACKAGE = CHUNK + TAG
READ_PACKAGES = 16          # about 1 MiB of ciphertext per read
DEFAULT_KMS_KEY = "aws/s3"
KMS_ACCOUNT = "000000000000"   # the account part of key ARNs, as the plane's (models.KMS_ACCOUNT)
SSE_HEADER = "x-amz-server-side-encryption"
KMS_KEY_HEADER = "x-amz-server-side-encryption-aws-kms-key-id"
BUCKET_KEY_HEADER = "x-amz-server-side-encryption-bucket-key-enabled"
CUSTOMER = "x-amz-server-side-encryption-customer-"
COPY_CUSTOMER = "x-amz-copy-source-server-side-encryption-customer-"

ERROR_CODES.update({
    "InvalidEncryptionAlgorithmError": (400, "The encryption request you specified is not valid. "
                                             "The valid value is AES256."),
    "KMS.NotFoundException": (400, "Invalid keyId"),
    "KMS.DisabledException": (400, "The request was rejected because the specified KMS key is not enabled."),
    "ServerSideEncryptionConfigurationNotFoundError": (404, "The server side encryption configuration "
                                                            "was not found"),
})


def stored_size(plain: int) -> int:
    """Bytes on disk for ``plain`` bytes of plaintext."""
    return plain + TAG * ((plain + CHUNK - 1) // CHUNK)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


# -- keys -----------------------------------------------------------------------------------


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


def _wrap(aes: AESGCM, dek: bytes, aad: bytes) -> str:
    nonce = os.urandom(12)
    return _b64(nonce + aes.encrypt(nonce, dek, aad))


def _unwrap(aes: AESGCM, wrapped: str, aad: bytes) -> bytes:
    raw = _unb64(wrapped)
    return aes.decrypt(raw[:12], raw[12:], aad)


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
    if not hmac.compare_digest(md5.encode(), _b64(hashlib.md5(raw).digest()).encode()):
        raise S3Error("InvalidArgument", "The calculated MD5 hash of the key did not match the hash that was provided.",
                      ArgumentName=prefix + "key-MD5")
    return CustomerKey(raw, md5)


# -- writing --------------------------------------------------------------------------------


class ChunkCipher:
    """Seals a piece's plaintext package by package (see the module doc); feed it the
    plaintext in order with :meth:`update`, then :meth:`final`."""

    def __init__(self, dek: bytes):
        self.aes = AESGCM(dek)
        self.np = os.urandom(8)
        self.index = 0
        self.buf = bytearray()

    def _seal(self, chunk) -> bytes:
        nonce = self.np + self.index.to_bytes(4, "big")
        self.index += 1
        return self.aes.encrypt(nonce, bytes(chunk), None)

    def update(self, data) -> list[bytes]:
        """Sealed packages completed by ``data``."""
        out = []
        view = memoryview(data)
        if self.buf:
            take = CHUNK - len(self.buf)
            self.buf += view[:take]
            view = view[take:]
            if len(self.buf) < CHUNK:
                return out
            out.append(self._seal(self.buf))
            self.buf = bytearray()
        while len(view) >= CHUNK:
            out.append(self._seal(view[:CHUNK]))
            view = view[CHUNK:]
        self.buf += view
        return out

    def final(self) -> list[bytes]:
        """The last, short package (if any)."""
        if not self.buf:
            return []
        out = [self._seal(self.buf)]
        self.buf = bytearray()
        return out

    def seal_all(self, data: bytes) -> bytes:
        """A whole (small) piece at once."""
        return b"".join(self.update(data) + self.final())


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
            info["np"] = _b64(nonce_prefixes)
        else:
            info["nps"] = [_b64(n) for n in nonce_prefixes]
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
        wrapped = _wrap(AESGCM(ckey.key), dek, b"sse-c")
        return WriteKey(mode, dek, wrapped, customer_md5=ckey.md5)
    if mode == "aws:kms":
        wrapped = _wrap(keyring.kms_kek(kms_id), dek, b"kms:" + kms_id.encode())
        return WriteKey(mode, dek, wrapped, kms_id=kms_id, bucket_key=bucket_key, kms_arn=keyring.key_arn(kms_id))
    wrapped = _wrap(keyring.kek(b"sse-s3"), dek, b"sse-s3")
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


# -- reading --------------------------------------------------------------------------------


def data_key(keyring: Keyring, info: dict, ckey: CustomerKey | None) -> bytes:
    """Unwrap a stored version's data key (SSE-C needs the customer's key: ``AccessDenied``
    when it is not the one the object was written with)."""
    mode = info["m"]
    try:
        if mode == "SSE-C":
            if ckey is None:
                raise S3Error("InvalidRequest", "The object was stored using a form of Server Side Encryption. "
                              "The correct parameters must be provided to retrieve the object.")
            return _unwrap(AESGCM(ckey.key), info["wk"], b"sse-c")
        if mode == "aws:kms":
            kid = info.get("kid") or DEFAULT_KMS_KEY
            return _unwrap(keyring.kms_kek(kid), info["wk"], b"kms:" + kid.encode())
        return _unwrap(keyring.kek(b"sse-s3"), info["wk"], b"sse-s3")
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


def physical_size(rec) -> int:
    """Bytes the version's data takes on disk (its ciphertext when encrypted)."""
    if "sse" not in rec.meta:
        return rec.size
    sizes = _part_sizes(rec.loc)
    return sum(stored_size(s) for s in sizes) if sizes is not None else stored_size(rec.size)


def physical_ranges(rec, loc: dict, segment_dir: str) -> list[tuple[str, int, int]]:
    """(path, offset, length) of every stored byte of an encrypted version at ``loc``."""
    return [(path, off, stored_size(plain)) for path, off, plain, _ in _pieces(rec, loc, segment_dir)]


def _part_sizes(loc: dict) -> list[int] | None:
    if "parts" in loc:
        return [s for _, s in loc["parts"]]
    return loc.get("psizes")


def _pieces(rec, loc: dict, segment_dir: str) -> list[tuple[str, int, int, bytes]]:
    """(path, offset of its first package, plaintext size, nonce prefix) per piece."""
    info = rec.meta["sse"]
    nps = [_unb64(n) for n in info["nps"]] if "nps" in info else [_unb64(info["np"])]
    if "seg" in loc:
        return [(os.path.join(segment_dir, f"{loc['seg']:08d}.seg"), loc["off"], rec.size, nps[0])]
    if "parts" in loc:
        return [(path, 0, size, np) for (path, size), np in zip(loc["parts"], nps)]
    sizes = _part_sizes(rec.loc) or [rec.size]   # a cold copy joins the parts in one file
    out, off = [], 0
    for size, np in zip(sizes, nps):
        out.append((loc["file"], off, size, np))
        off += stored_size(size)
    return out


def _plan(pieces, start: int, end: int) -> list[tuple[int, int, int, int, int, bytes]]:
    """Per overlapped piece: (piece index, first package, package count, bytes to skip in the
    first package, bytes wanted, nonce prefix)."""
    plan, base = [], 0
    for i, (_path, _off, size, np) in enumerate(pieces):
        lo, hi = max(start, base), min(end, base + size)
        if lo < hi:
            a, b = lo - base, hi - base
            first = a // CHUNK
            count = (b - 1) // CHUNK + 1 - first
            plan.append((i, first, count, a - first * CHUNK, b - a, np))
        base += size
    return plan


def _open_packages(aes: AESGCM, np: bytes, first: int, data: bytes, path: str) -> list[bytes]:
    out = []
    for j in range(0, len(data), PACKAGE):
        nonce = np + (first + j // PACKAGE).to_bytes(4, "big")
        try:
            out.append(aes.decrypt(nonce, data[j:j + PACKAGE], None))
        except InvalidTag:
            raise IOError(f"encrypted data in {path} fails authentication (damaged on disk); run a scrub") from None
    return out


def read_plain(handles: list, pieces, plan, dek: bytes) -> Iterator[bytes]:
    """Plaintext of ``plan`` from the opened piece files (blocking), about 1 MiB at a time."""
    aes = AESGCM(dek)
    for i, first, count, skip, want, np in plan:
        fd = handles[i].fileno()
        path, off, size, _ = pieces[i]
        done = 0
        while done < count:
            n = min(READ_PACKAGES, count - done)
            pkg = first + done
            length = min((pkg + n) * CHUNK, size) - pkg * CHUNK + n * TAG
            data = os.pread(fd, length, off + pkg * PACKAGE)
            if len(data) != length:
                raise IOError(f"{path} is shorter than the index says; run a scrub")
            plain = b"".join(_open_packages(aes, np, pkg, data, path))
            if skip:
                plain, skip = plain[skip:], 0
            if len(plain) > want:
                plain = plain[:want]
            want -= len(plain)
            done += n
            if plain:
                yield plain


async def open_decrypting(gw, rec, loc: dict, start: int, end: int, ckey: CustomerKey | None) -> AsyncIterator[bytes]:
    """Open an encrypted version's files now and stream plaintext [start, end)."""
    dek = data_key(gw.keyring, rec.meta["sse"], ckey)
    pieces = _pieces(rec, loc, gw.segments.dir)
    plan = _plan(pieces, start, end)
    if "seg" in loc:  # small: inline, as plaintext segment reads are
        with open(pieces[0][0], "rb", buffering=0) as fh:
            data = b"".join(read_plain([fh], pieces, plan, dek))
        return _once(data)

    def open_all():
        handles = {}
        try:
            for i, *_ in plan:
                handles[i] = open(pieces[i][0], "rb", buffering=0)
        except BaseException:
            for fh in handles.values():
                fh.close()
            raise
        return handles

    handles = await gw.run(open_all)
    return _stream(gw, handles, read_plain(handles, pieces, plan, dek))


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _stream(gw, handles: dict, blocks: Iterator[bytes]) -> AsyncIterator[bytes]:
    sentinel = object()
    try:
        while True:
            data = await gw.run(next, blocks, sentinel)
            if data is sentinel:
                return
            yield data
    finally:
        for fh in handles.values():
            fh.close()


# -- bucket default encryption ----------------------------------------------------------------


def parse_bucket_encryption(body: bytes, keyring: Keyring) -> dict:
    """A ServerSideEncryptionConfiguration document -> the bucket setting
    ``{"alg", ["kid"], ["bk"]}`` (``MalformedXML`` / ``InvalidArgument`` / ``KMS.NotFoundException``)."""
    root = parse_xml(body)
    if root.tag != "ServerSideEncryptionConfiguration":
        raise S3Error("MalformedXML")
    rules = root.findall("Rule")
    if len(rules) != 1:
        raise S3Error("MalformedXML", "A ServerSideEncryptionConfiguration holds exactly one Rule")
    default = rules[0].find("ApplyServerSideEncryptionByDefault")
    if default is None:
        raise S3Error("MalformedXML", "The Rule needs ApplyServerSideEncryptionByDefault")
    alg = child_text(default, "SSEAlgorithm")
    kid = child_text(default, "KMSMasterKeyID")
    if alg not in ("AES256", "aws:kms"):
        raise S3Error("MalformedXML" if alg is None else "InvalidArgument",
                      "SSEAlgorithm must be AES256 or aws:kms", ArgumentName="SSEAlgorithm",
                      ArgumentValue=str(alg))
    setting = {"alg": alg}
    if kid is not None:
        if alg != "aws:kms":
            raise S3Error("InvalidArgument", "a KMSMasterKeyID is not applicable if the default sse algorithm "
                          "is not aws:kms", ArgumentName="ApplyServerSideEncryptionByDefault")
        setting["kid"] = keyring.kms_id(kid)
        setting["kid_given"] = kid
    keyring.kek(b"sse-s3")  # no master key: refused now rather than at every PUT
    bk = (child_text(rules[0], "BucketKeyEnabled") or "false").lower()
    if bk not in ("true", "false"):
        raise S3Error("MalformedXML", "BucketKeyEnabled must be true or false")
    if bk == "true":
        setting["bk"] = True
    return setting


def bucket_encryption_xml(setting: dict) -> bytes:
    """GetBucketEncryption's document for a bucket setting."""
    inner = el("SSEAlgorithm", setting["alg"])
    if setting.get("kid_given"):
        inner += el("KMSMasterKeyID", setting["kid_given"])
    rule = (f"<Rule><ApplyServerSideEncryptionByDefault>{inner}</ApplyServerSideEncryptionByDefault>"
            + el("BucketKeyEnabled", bool(setting.get("bk"))) + "</Rule>")
    return xml_doc("ServerSideEncryptionConfiguration", rule)


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


def nonce_text(cipher: ChunkCipher | None) -> str | None:
    """A piece's nonce prefix as kept in JSON."""
    return _b64(cipher.np) if cipher is not None else None
