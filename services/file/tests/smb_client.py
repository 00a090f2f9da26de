"""Helpers over the two SMB clients of the tests: the smbclient CLI and PyPI smbprotocol."""

from __future__ import annotations

import hashlib
import subprocess


def smbclient(server, share: str, user: str, password: str, command: str,
              encrypt: bool = False) -> subprocess.CompletedProcess:
    """Run ``smbclient //127.0.0.1/<share> -c <command>`` (SMB3) against ``server``."""
    argv = ["smbclient", f"//127.0.0.1/{share}", "-p", str(server.settings.port),
            "-U", f"{user}%{password}", "-m", "SMB3", "-c", command]
    if encrypt:
        argv.append("--client-protection=encrypt")
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)


class SmbProtocolClient:
    """smbprotocol's high-level ``smbclient`` API with a private connection cache."""

    def __init__(self, server, user: str, password: str, encrypt: bool = True):
        import smbclient as api
        self.api, self.cache = api, {}
        self.port = server.settings.port
        self.kw = {"username": user, "password": password, "port": self.port,
                   "encrypt": encrypt, "connection_cache": self.cache}

    def path(self, share: str, name: str) -> str:
        """UNC path of ``name`` in ``share``."""
        return rf"\\127.0.0.1\{share}\{name}"

    def write(self, share: str, name: str, data: bytes, chunk: int = 4 << 20) -> None:
        """Write ``data`` to ``share/name``."""
        with self.api.open_file(self.path(share, name), mode="wb", **self.kw) as f:
            for offset in range(0, len(data), chunk):
                f.write(data[offset:offset + chunk])

    def read_hash(self, share: str, name: str) -> tuple[int, str]:
        """(size, sha256) of ``share/name`` read back."""
        digest, total = hashlib.sha256(), 0
        with self.api.open_file(self.path(share, name), mode="rb", **self.kw) as f:
            while True:
                block = f.read(4 << 20)
                if not block:
                    break
                digest.update(block)
                total += len(block)
        return total, digest.hexdigest()

    def close(self) -> None:
        """Drop every connection this client opened."""
        self.api.reset_connection_cache(connection_cache=self.cache)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
