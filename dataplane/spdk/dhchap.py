"""DH-HMAC-CHAP keys of NVMe-oF hosts, handed to nvmf_tgt through SPDK's keyring.

A key is the NVMe secret representation ``DHHC-1:<hash>:<base64 of key and CRC-32>:`` (as
``nvme gen-dhchap-key`` prints it): a 32, 48 or 64-byte key followed by its CRC-32
(little-endian), hash 00 (none), 01 (SHA-256), 02 (SHA-384) or 03 (SHA-512).

SPDK's ``keyring_file`` module reads each key from a file readable by its owner only, so the
driver keeps one file per (subsystem, host) under ``<state_dir>/nvmf-keys/`` (mode 0600) and
names it in the keyring; the plane keeps the secret itself. After an nvmf_tgt restart the
keyring is empty: :meth:`DhchapKeys.load` adds the recorded keys again before the hosts that
use them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import secrets
import struct
import zlib
from pathlib import Path

from ..errors import InvalidArgument, NotFound

KEY_RE = re.compile(r"^DHHC-1:(0[0-3]):([A-Za-z0-9+/]+={0,2}):$")
KEY_LENGTHS = (32, 48, 64)


def check_dhchap_key(key, field: str = "dhchap_key") -> str:
    """``key`` if it is a well-formed DH-HMAC-CHAP secret, else InvalidArgument naming ``field``."""
    m = KEY_RE.match(key) if isinstance(key, str) else None
    if not m:
        raise InvalidArgument(f"{field}: not a DH-HMAC-CHAP secret (DHHC-1:00:<base64>:, as "
                              "`nvme gen-dhchap-key` prints it)")
    try:
        raw = base64.b64decode(m.group(2), validate=True)
    except binascii.Error:
        raise InvalidArgument(f"{field}: the key is not valid base64") from None
    if len(raw) - 4 not in KEY_LENGTHS:
        raise InvalidArgument(f"{field}: the key must be 32, 48 or 64 bytes (and its CRC-32), "
                              f"not {max(len(raw) - 4, 0)}")
    if struct.pack("<I", zlib.crc32(raw[:-4])) != raw[-4:]:
        raise InvalidArgument(f"{field}: the key's CRC-32 does not match (a mistyped key?)")
    return key


def generate_dhchap_key(length: int = 32) -> str:
    """A new random secret (hash 00) in the ``DHHC-1`` representation."""
    if length not in KEY_LENGTHS:
        raise InvalidArgument(f"a DH-HMAC-CHAP key is 32, 48 or 64 bytes, not {length}")
    raw = os.urandom(length)
    return f"DHHC-1:00:{base64.b64encode(raw + struct.pack('<I', zlib.crc32(raw))).decode()}:"


class DhchapKeys:
    """The driver's DH-HMAC-CHAP keys: files in ``key_dir`` and their names in SPDK's keyring."""

    def __init__(self, rpc, key_dir: Path):
        self.rpc = rpc
        self.key_dir = Path(key_dir)

    def put(self, subnqn: str, hostnqn: str, secret: str, old: str | None = None) -> str:
        """The keyring name of the key ``hostnqn`` uses for subsystem ``subnqn``: ``old`` when
        its file holds ``secret`` already, else a new name (a host admitted with a key keeps
        the key it was given, so a changed key needs a new name and the host admitted again)
        whose file (0600) is written here."""
        if old and self._holds(old, secret):
            return old
        base = hashlib.sha256(f"{subnqn} {hostnqn}".encode()).hexdigest()[:16]
        name = f"strata-{base}-{secrets.token_hex(4)}"
        self.key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.key_dir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret)
            f.flush()
            os.fsync(f.fileno())
        return name

    def _holds(self, name: str, secret: str) -> bool:
        try:
            return (self.key_dir / name).read_text() == secret
        except OSError:
            return False

    def load(self, names) -> list:
        """Add the named keys to the keyring where missing; return the names added."""
        have = {k["name"] for k in self.rpc.call("keyring_get_keys")}
        added = []
        for name in sorted(set(names) - have):
            if not (self.key_dir / name).exists():
                raise NotFound(f"DH-HMAC-CHAP key {name} has no file in {self.key_dir}")
            self.rpc.call("keyring_file_add_key", name=name, path=str(self.key_dir / name))
            added.append(name)
        return added

    def drop(self, name: str) -> None:
        """Remove a key from the keyring and its file."""
        self._unload(name)
        (self.key_dir / name).unlink(missing_ok=True)

    def _unload(self, name: str) -> None:
        try:
            self.rpc.call("keyring_file_remove_key", name=name)
        except (NotFound, InvalidArgument):
            pass     # not loaded
