"""The stored format of encrypted data (DARE-like; see the package doc): a piece's plaintext
in 64 KiB packages, package ``i`` sealed with AES-256-GCM under nonce ``np || i`` and stored
as its ciphertext followed by its 16-byte tag."""
from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .keys import b64

CHUNK = 64 * 1024
TAG = 16
PACKAGE = CHUNK + TAG


def stored_size(plain: int) -> int:
    """Bytes on disk for ``plain`` bytes of plaintext."""
    return plain + TAG * ((plain + CHUNK - 1) // CHUNK)


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


def open_packages(aes: AESGCM, np: bytes, first: int, data: bytes, path: str) -> list[bytes]:
    """The plaintext of whole sealed packages ``data`` (the first is package ``first`` of the
    piece whose nonce prefix is ``np``, read from ``path``); ``IOError`` on a damaged one."""
    out = []
    for j in range(0, len(data), PACKAGE):
        nonce = np + (first + j // PACKAGE).to_bytes(4, "big")
        try:
            out.append(aes.decrypt(nonce, data[j:j + PACKAGE], None))
        except InvalidTag:
            raise IOError(f"encrypted data in {path} fails authentication (damaged on disk); run a scrub") from None
    return out


def nonce_text(cipher: ChunkCipher | None) -> str | None:
    """A piece's nonce prefix as kept in JSON."""
    return b64(cipher.np) if cipher is not None else None
