"""Small helpers over the nfs-rs client used by the NFS tests and the benchmark (and what a
Ganesha's log says of its epoch)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

CHUNK = 4 * 1024 * 1024


def connect(port: int, pseudo: str, host: str = "127.0.0.1", version: str = "4.1"):
    """An nfs-rs client of ``pseudo`` on ``host:port`` (NFSv4.1 by default)."""
    import nfs_rs
    return nfs_rs.Client.connect(f"nfs://{host}:{port}{pseudo}?version={version}",
                                 connect_timeout=10, operation_timeout=60)


def write_file(client, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` over NFS in CHUNK-sized writes."""
    with client.open(path, "wb") as f:
        for offset in range(0, len(data), CHUNK):
            f.write(data[offset:offset + CHUNK])


def read_hash(client, path: str) -> tuple[int, str]:
    """(size, sha256) of ``path`` read back over NFS.

    Reads one ``max_read`` at a time: nfs-rs 0.8.7 splits a larger buffer into parallel
    NFSv4.1 READs, and READs past EOF in parallel make Ganesha 4.3 answer the session's
    next requests with NFS4ERR_RETRY_UNCACHED_REP.
    """
    digest, total, buf = hashlib.sha256(), 0, bytearray(client.io_limits.max_read)
    with client.open(path, "rb") as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            digest.update(memoryview(buf)[:n])
            total += n
    return total, digest.hexdigest()


def listdir(client, path: str = ".") -> list[str]:
    """The sorted names in directory ``path`` over NFS, the export root included.

    nfs-rs 0.8.7 (the latest) turns the root (".", "" or "/") into a LOOKUP of ".", which
    NFSv4 refuses: "." is not a component name, and Ganesha answers NFS4ERR_BADNAME on
    every FSAL (VFS as CEPH). Its core lists the root by the empty path, as below.
    """
    if path.strip("/.") == "":
        return sorted(entry["name"] for batch in client._inner.scandir("") for entry in batch)
    return sorted(client.listdir(path))


def error_codes(exc: BaseException) -> str:
    """Every NFS error code name and message in ``exc``'s cause chain, for assertions."""
    parts = []
    while exc is not None:
        parts += [str(getattr(exc, "code_name", "") or ""), str(exc)]
        exc = exc.__cause__ or exc.__context__
    return " ".join(parts)


def sha(data: bytes) -> str:
    """sha256 hex of ``data``."""
    return hashlib.sha256(data).hexdigest()


def ganesha_epoch(log_path) -> int:
    """The epoch of the Ganesha that last wrote ``log_path`` (each of its lines says it): its
    client, session and state IDs are made from it."""
    found = re.findall(r" : epoch ([0-9a-f]{8}) : ", Path(log_path).read_text())
    assert found, Path(log_path).read_text()[-2000:]
    return int(found[-1], 16)
