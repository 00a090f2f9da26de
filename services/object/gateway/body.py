"""Request bodies: Content-Length enforcement and aws-chunked decoding with signatures.

:func:`open_body` returns a :class:`Body` whose ``stream()`` yields the object's bytes
(decoded when the request used aws-chunked) and whose ``trailers`` hold trailing checksum
headers once the stream is exhausted. A body shorter than its Content-Length raises
``IncompleteBody``; a bad chunk signature raises ``SignatureDoesNotMatch``.
"""
from __future__ import annotations

import hashlib
import hmac
from typing import AsyncIterator

from . import sigv4
from .errors import S3Error

MAX_CHUNK_HEADER = 4096


class Body:
    """One request body; iterate ``stream()`` once."""

    def __init__(self, receive, headers: dict[str, str], auth: sigv4.AuthContext | None):
        self.receive = receive
        self.headers = headers
        self.auth = auth
        self.trailers: dict[str, str] = {}
        cl = headers.get("content-length")
        self.content_length = None
        if cl is not None:
            try:
                self.content_length = int(cl)
            except ValueError:
                raise S3Error("InvalidArgument", f"Content-Length {cl!r} is not a number") from None
            if self.content_length < 0:
                raise S3Error("InvalidArgument", "Content-Length must not be negative")
        mode = auth.payload_hash if auth else ""
        # a STREAMING-* payload is aws-chunked; Content-Encoding: aws-chunked alone frames the
        # body only when it also says the decoded length and the payload is not declared plain
        # (UNSIGNED-PAYLOAD or its SHA-256): S3 takes "gzip, aws-chunked" on a plain body
        plain = mode == sigv4.UNSIGNED or len(mode) == 64
        self.chunked = mode in sigv4.STREAMING_MODES or (
            "aws-chunked" in headers.get("content-encoding", "") and not plain
            and "x-amz-decoded-content-length" in headers)
        self.mode = mode
        if self.chunked:
            dl = headers.get("x-amz-decoded-content-length")
            if dl is None:
                raise S3Error("MissingContentLength", "aws-chunked uploads need x-amz-decoded-content-length")
            try:
                self.size = int(dl)
            except ValueError:
                raise S3Error("InvalidArgument", "x-amz-decoded-content-length is not a number") from None
        else:
            self.size = self.content_length
        # the payload hash to verify against the body, when it is a real digest
        self.payload_hash = mode if len(mode) == 64 else None

    async def raw(self, already: int = 0) -> AsyncIterator[bytes]:
        """Bytes as received, checked against Content-Length (``already``: bytes of it that
        were received before)."""
        got = already
        more = True
        while more:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise S3Error("IncompleteBody")
            data = message.get("body", b"")
            more = message.get("more_body", False)
            got += len(data)
            if self.content_length is not None and got > self.content_length:
                raise S3Error("IncompleteBody", "The body is longer than Content-Length")
            if data:
                yield data
        if self.content_length is not None and got < self.content_length:
            raise S3Error("IncompleteBody")

    def stream(self) -> AsyncIterator[bytes]:
        """The object bytes (aws-chunked decoded when needed)."""
        if self.chunked:
            return self._dechunk()
        return self.raw()

    async def read_all(self, limit: int = 64 << 20) -> bytes:
        """The whole body in memory (only for small XML documents and small objects)."""
        if self.chunked:
            return await self._join(self._dechunk(), limit)
        # a body that arrives in one message (the rule for a small PUT) is returned as it is:
        # no copy, and no async generator between it and the server
        message = await self.receive()
        if message["type"] == "http.disconnect":
            raise S3Error("IncompleteBody")
        data = message.get("body", b"")
        if message.get("more_body", False):
            return await self._join(self._rest(data), limit)
        if self.content_length is not None and len(data) != self.content_length:
            raise S3Error("IncompleteBody", "The body is longer than Content-Length"
                          if len(data) > self.content_length else None)
        if len(data) > limit:
            raise S3Error("EntityTooLarge", f"This request body may not exceed {limit} bytes")
        return data

    async def _rest(self, first: bytes) -> AsyncIterator[bytes]:
        """``first`` (already received), then the rest of :meth:`raw`."""
        if self.content_length is not None and len(first) > self.content_length:
            raise S3Error("IncompleteBody", "The body is longer than Content-Length")
        if first:
            yield first
        async for data in self.raw(already=len(first)):
            yield data

    @staticmethod
    async def _join(chunks: AsyncIterator[bytes], limit: int) -> bytes:
        first, out = b"", None  # a body that arrives in one piece is returned as it is (no copy)
        async for data in chunks:
            if out is None and not first:
                first = data
            else:
                if out is None:
                    out = bytearray(first)
                out += data
            if len(first if out is None else out) > limit:
                raise S3Error("EntityTooLarge", f"This request body may not exceed {limit} bytes")
        return first if out is None else bytes(out)

    async def _dechunk(self) -> AsyncIterator[bytes]:
        signed = self.mode in (sigv4.STREAMING_SIGNED, sigv4.STREAMING_SIGNED_TRAILER)
        previous = self.auth.seed_signature if self.auth else ""
        buf = bytearray()
        source = self.raw()

        async def fill() -> bool:
            try:
                buf.extend(await source.__anext__())
                return True
            except StopAsyncIteration:
                return False

        async def line() -> bytes:
            while True:
                idx = buf.find(b"\r\n")
                if idx >= 0:
                    out = bytes(buf[:idx])
                    del buf[: idx + 2]
                    return out
                if len(buf) > MAX_CHUNK_HEADER or not await fill():
                    raise S3Error("IncompleteBody", "aws-chunked body ended inside a chunk header")

        total = 0
        while True:
            header = (await line()).decode("latin-1")
            size_hex, _, ext = header.partition(";")
            try:
                size = int(size_hex, 16)
            except ValueError:
                raise S3Error("InvalidRequest", f"Bad aws-chunked chunk header {header[:60]!r}") from None
            chunk_sig = ext.partition("chunk-signature=")[2].strip() if ext else ""
            if signed and not chunk_sig:
                raise S3Error("SignatureDoesNotMatch", "A chunk signature is missing")
            h = hashlib.sha256() if signed else None
            remaining = size
            while remaining:
                if not buf and not await fill():
                    raise S3Error("IncompleteBody")
                piece = bytes(buf[:remaining])
                del buf[: len(piece)]
                remaining -= len(piece)
                if h is not None:
                    h.update(piece)
                yield piece
            total += size
            if signed:
                sts = sigv4.chunk_string_to_sign(self.auth, previous, h.hexdigest())
                expected = sigv4.hmac_hex(self.auth.signing_key, sts)
                if not hmac.compare_digest(expected, chunk_sig):
                    raise S3Error("SignatureDoesNotMatch", "A chunk signature does not match")
                previous = expected
            if size == 0:
                break
            if await line() != b"":
                raise S3Error("InvalidRequest", "aws-chunked chunk is not followed by CRLF")
        # trailing headers (possibly none): everything left, one header per CRLF line
        while await fill():
            pass
        trailer_lines = [t for t in bytes(buf).decode("latin-1").split("\r\n") if t]
        trailer_sig = None
        for text in trailer_lines:
            name, _, value = text.partition(":")
            name = name.strip().lower()
            if name == "x-amz-trailer-signature":
                trailer_sig = value.strip()
            else:
                self.trailers[name] = value.strip()
        if self.mode == sigv4.STREAMING_SIGNED_TRAILER:
            payload = "".join(f"{k}:{v}\n" for k, v in self.trailers.items())
            sts = sigv4.trailer_string_to_sign(self.auth, previous, hashlib.sha256(payload.encode()).hexdigest())
            if trailer_sig is None or not hmac.compare_digest(sigv4.hmac_hex(self.auth.signing_key, sts), trailer_sig):
                raise S3Error("SignatureDoesNotMatch", "The trailer signature does not match")
        if total != self.size:
            raise S3Error("IncompleteBody", f"Decoded {total} bytes, x-amz-decoded-content-length says {self.size}")
        declared = [n.strip().lower() for n in self.headers.get("x-amz-trailer", "").split(",") if n.strip()]
        for name in declared:
            if name not in self.trailers:
                raise S3Error("InvalidRequest", f"Declared trailer {name} was not sent")
