"""Object digests: the MD5 ETag and the S3 additional checksums (CRC32, CRC32C, CRC64NVME,
SHA1, SHA256), and the checksum of a multipart object: COMPOSITE (:func:`composite`) or
FULL_OBJECT (:func:`full_object`, CRCs only).

A :class:`Digests` is fed every byte of a body once (from a worker thread for large bodies:
hashlib and zlib release the GIL) and then checked against what the client claimed.
"""
from __future__ import annotations

import base64
import hashlib
import zlib

from anycrc import Model
from crc32c import crc32c

from . import crc

from .errors import S3Error

ALGORITHMS = ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")
CRCS = ("crc32", "crc32c", "crc64nvme")  # the algorithms a FULL_OBJECT multipart checksum may use


class _Crc:
    """A running CRC (zlib.crc32, crc32c from the crc32c package, or CRC64NVME from anycrc)
    with hashlib's interface."""

    def __init__(self, fn, width: int = 32):
        self.fn, self.value, self.width = fn, 0, width

    def update(self, data: bytes) -> None:
        self.value = self.fn(data, self.value)

    def digest(self) -> bytes:
        return (self.value & ((1 << self.width) - 1)).to_bytes(self.width // 8, "big")


def _new(algorithm: str):
    if algorithm == "crc32":
        return _Crc(zlib.crc32)
    if algorithm == "crc32c":
        return _Crc(crc32c)
    if algorithm == "crc64nvme":
        crc64 = Model("CRC64-NVME")
        return _Crc(lambda data, value: crc64.calc(data, value), 64)
    if algorithm == "sha1":
        return hashlib.sha1()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise S3Error("InvalidRequest", f"Unsupported checksum algorithm {algorithm!r}; use one of {ALGORITHMS}")


DIGEST_BYTES = {"crc32": 4, "crc32c": 4, "crc64nvme": 8, "sha1": 20, "sha256": 32}


def is_checksum_value(algorithm: str, value: str) -> bool:
    """Whether ``value`` is the base64 of a digest of ``algorithm`` (without a ``-N`` suffix)."""
    try:
        return len(base64.b64decode(value, validate=True)) == DIGEST_BYTES[algorithm]
    except ValueError:
        return False


def composite(algorithm: str, part_values: list[str]) -> str:
    """S3's checksum of a multipart object: the algorithm over the concatenated binary part
    checksums, base64, with ``-N`` (N parts) appended (checksum type COMPOSITE)."""
    h = _new(algorithm)
    h.update(b"".join(base64.b64decode(v) for v in part_values))
    return base64.b64encode(h.digest()).decode() + f"-{len(part_values)}"


def full_object(algorithm: str, parts: list[tuple[str, int]]) -> str:
    """The FULL_OBJECT checksum of a multipart object: its parts' CRCs (base64 values, with
    their sizes) combined in order into the CRC of the whole body (:mod:`.crc`)."""
    values = [(int.from_bytes(base64.b64decode(v), "big"), size) for v, size in parts]
    width = crc.POLYNOMIALS[algorithm][1]
    return base64.b64encode(crc.combine_all(algorithm, values).to_bytes(width // 8, "big")).decode()


def requested_algorithms(headers: dict[str, str]) -> set[str]:
    """Checksum algorithms a request asks for (by value header, SDK header or trailer)."""
    algos = set()
    for name in headers:
        if name.startswith("x-amz-checksum-") and name[15:] in ALGORITHMS:
            algos.add(name[15:])
    sdk = headers.get("x-amz-sdk-checksum-algorithm") or headers.get("x-amz-checksum-algorithm")
    if sdk:
        algo = sdk.lower()
        if algo not in ALGORITHMS:
            raise S3Error("InvalidRequest", f"Unsupported checksum algorithm {sdk!r}; use one of {ALGORITHMS}")
        algos.add(algo)
    for name in headers.get("x-amz-trailer", "").split(","):
        name = name.strip().lower()
        if name.startswith("x-amz-checksum-"):
            algo = name[15:]
            if algo not in ALGORITHMS:
                raise S3Error("InvalidRequest", f"Unsupported trailer checksum {name!r}")
            algos.add(algo)
    return algos


# hashlib hands the GIL over for every update of 2,048 bytes or more (and for every update
# after one such): on the event loop, with the committer thread waiting for the GIL, that is
# two thread switches per digest. A small body is hashed in pieces below that size instead.
GIL_FREE_PIECE = 2032
SMALL_BODY = 16 * 1024


class Digests:
    """Running MD5 (+ optional SHA-256 of the payload) and S3 checksums of one body."""

    def __init__(self, algorithms: set[str] = frozenset(), payload_sha256: bool = False):
        self.md5 = hashlib.md5()
        self.size = 0
        self.sha256 = hashlib.sha256() if payload_sha256 and "sha256" not in algorithms else None
        self.checks = {a: _new(a) for a in algorithms}

    def update(self, data: bytes) -> None:
        """Feed the next bytes of the body."""
        self.size += len(data)
        hashes = [self.md5, *self.checks.values()]
        if self.sha256 is not None:
            hashes.append(self.sha256)
        # large: hashed whole, without the GIL (from a worker thread); small: in pieces
        step = len(data) if len(data) > SMALL_BODY else GIL_FREE_PIECE
        view = memoryview(data)
        for start in range(0, len(view), step):
            piece = view[start:start + step]
            for h in hashes:
                h.update(piece)

    def payload_sha256_hex(self) -> str:
        """Hex SHA-256 of the body (for x-amz-content-sha256)."""
        if self.sha256 is not None:
            return self.sha256.hexdigest()
        return self.checks["sha256"].digest().hex()

    def checksums(self) -> dict[str, str]:
        """Base64 checksum values by algorithm, as S3 returns them."""
        return {a: base64.b64encode(h.digest()).decode() for a, h in self.checks.items()}

    def verify(self, headers: dict[str, str], trailers: dict[str, str], payload_hash: str | None) -> dict[str, str]:
        """Compare the body against Content-MD5, x-amz-checksum-* and the payload hash.

        Returns the checksums to store. Raises ``BadDigest`` / ``InvalidDigest`` /
        ``XAmzContentSHA256Mismatch``.
        """
        md5 = headers.get("content-md5")
        if md5 is not None:
            try:
                want = base64.b64decode(md5, validate=True)
            except ValueError:
                raise S3Error("InvalidDigest") from None
            if len(want) != 16:
                raise S3Error("InvalidDigest")
            if want != self.md5.digest():
                raise S3Error("BadDigest", "The Content-MD5 you specified did not match what we received.")
        if payload_hash and len(payload_hash) == 64 and (self.sha256 is not None or "sha256" in self.checks):
            if payload_hash != self.payload_sha256_hex():
                raise S3Error("XAmzContentSHA256Mismatch", ClientComputedContentSHA256=payload_hash,
                              S3ComputedContentSHA256=self.payload_sha256_hex())
        stored = self.checksums()
        for algo, value in stored.items():
            claimed = trailers.get(f"x-amz-checksum-{algo}") or headers.get(f"x-amz-checksum-{algo}")
            if claimed is not None and claimed != value:
                raise S3Error("BadDigest", f"The {algo.upper()} you specified did not match the calculated checksum.")
        return stored


def check_required_digest(headers: dict[str, str], trailers: dict[str, str], body: bytes) -> None:
    """For the requests S3 takes only with an integrity check of their body (DeleteObjects):
    without Content-MD5 or an x-amz-checksum-* value, 400 InvalidRequest; a value that does
    not match the body, 400 BadDigest (InvalidDigest for a Content-MD5 that is not one)."""
    claimed = {name[15:] for name in (*headers, *trailers)
               if name.startswith("x-amz-checksum-") and name[15:] in ALGORITHMS}
    if "content-md5" not in headers and not claimed:
        raise S3Error("InvalidRequest", "Missing required header for this request: Content-Md5")
    digests = Digests(claimed)
    digests.update(body)
    digests.verify(headers, trailers, None)
