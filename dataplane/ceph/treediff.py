"""Tree differences and the send stream of CephFS file systems.

Ceph 16.2 has no snapshot-diff API (cephfs-mirror walks trees the same way), so an
incremental stream compares two snapshot trees: an entry is sent when it is new or its type,
size, mtime, mode, owner or link target differs; entries of the parent that are gone are
named for deletion. Directory mtimes alone do not count (they move whenever an entry does).

Stream layout::

    MAGIC  u32 header-length  header (JSON: snapshot id, parent id, deleted paths)
    tar stream of the entries to create or replace (POSIX format, numeric owners)
    TRAILER  sha256 of everything before the trailer

A receiver spools and checks the whole stream before touching anything, so a truncated or
corrupt stream changes nothing.
"""

import hashlib
import json
import os
import shutil
import stat
import struct
import tarfile
from pathlib import Path
from typing import Iterable, Iterator, Optional

from ..errors import InvalidArgument

MAGIC = b"STRATA-CEPHFS-TREE/1\n"
TRAILER = b"STRATA-END\n"
CHUNK = 1 << 20


def tree_index(root: Path, skip: str) -> dict:
    """``{relative path: signature}`` of every entry under ``root`` (``skip`` directories
    left out). A signature is what a change shows in: type, size, mtime, mode, owner, link."""
    index = {}
    for dirpath, dirs, files in os.walk(root):
        if skip in dirs:
            dirs.remove(skip)
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            kind = stat.S_IFMT(st.st_mode)
            link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
            size = 0 if stat.S_ISDIR(st.st_mode) else st.st_size
            mtime = 0 if stat.S_ISDIR(st.st_mode) else st.st_mtime_ns
            index[rel] = (kind, size, mtime, st.st_mode & 0o7777, st.st_uid, st.st_gid, link)
    return index


def tree_changes(old: dict, new: dict) -> tuple:
    """``(changed or new paths, removed paths)`` between two tree indexes, each sorted."""
    changed = sorted(p for p, sig in new.items() if old.get(p) != sig)
    removed = sorted(p for p in old if p not in new or old[p][0] != new[p][0])
    return changed, removed


def changed_paths(old: dict, new: dict) -> list:
    """Paths created, written, removed or re-permissioned between two indexes, sorted."""
    changed, removed = tree_changes(old, new)
    return sorted(set(changed) | set(removed))


def send_stream(snapshot_dir: Path, snapshot_id: str, skip: str,
                parent_dir: Optional[Path] = None, parent_id: Optional[str] = None
                ) -> Iterator[bytes]:
    """The stream of ``snapshot_dir`` (incremental against ``parent_dir`` when given)."""
    new = tree_index(snapshot_dir, skip)
    if parent_dir is not None:
        changed, removed = tree_changes(tree_index(parent_dir, skip), new)
    else:
        changed, removed = sorted(new), []
    header = json.dumps({"snapshot": snapshot_id, "parent": parent_id,
                         "deleted": removed}).encode()
    digest = hashlib.sha256()

    def emit(data: bytes) -> bytes:
        digest.update(data)
        return data

    yield emit(MAGIC + struct.pack(">I", len(header)) + header)
    sink = _Chunks()
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rel in changed:
            tar.add(snapshot_dir / rel, arcname=rel, recursive=False)
            for chunk in sink.take():
                yield emit(chunk)
    for chunk in sink.take():
        yield emit(chunk)
    yield TRAILER + digest.digest()


class _Chunks:
    """A write-only file object that hands out what was written in pieces."""

    def __init__(self):
        self.parts = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> list:
        parts, self.parts = self.parts, []
        return parts


def spool_stream(stream: Iterable[bytes], spool) -> dict:
    """Write ``stream`` to the open binary file ``spool`` and check it whole: returns the
    header and leaves ``spool`` positioned at the tar part. InvalidArgument when the stream
    is truncated, corrupt or not a CephFS tree stream."""
    total = 0
    for chunk in stream:
        spool.write(chunk)
        total += len(chunk)
    tail = len(TRAILER) + hashlib.sha256().digest_size
    if total < len(MAGIC) + 4 + tail:
        raise InvalidArgument(f"send stream is empty or truncated ({total} bytes): nothing was "
                              "received; send it again")
    spool.seek(0)
    if spool.read(len(MAGIC)) != MAGIC:
        raise InvalidArgument("not a CephFS file-system stream (bad magic): send it with "
                              "send_snapshot of a ceph pool")
    spool.seek(total - tail)
    trailer = spool.read(tail)
    digest = hashlib.sha256()
    spool.seek(0)
    left = total - tail
    while left:
        data = spool.read(min(CHUNK, left))
        digest.update(data)
        left -= len(data)
    if trailer != TRAILER + digest.digest():
        raise InvalidArgument(f"send stream is truncated or corrupt after {total} bytes (its "
                              "checksum does not match): nothing was received; send it again")
    spool.seek(len(MAGIC))
    (length,) = struct.unpack(">I", spool.read(4))
    try:
        header = json.loads(spool.read(length))
    except ValueError as exc:
        raise InvalidArgument(f"corrupt stream header: {exc}") from exc
    header["tar_start"] = spool.tell()
    return header


def apply_stream(spool, header: dict, target: Path) -> None:
    """Apply a spooled stream (checked by :func:`spool_stream`) onto ``target``: delete
    what the header names, then extract the entries with their owners and modes."""
    spool.seek(header["tar_start"])
    for rel in header["deleted"]:
        path = _inside(target, rel)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    with tarfile.open(fileobj=spool, mode="r|") as tar:
        for member in tar:
            dest = _inside(target, member.name)
            if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
                dest.unlink()
            elif dest.is_dir() and not member.isdir():
                shutil.rmtree(dest)
            tar.extract(member, target, numeric_owner=True, set_attrs=True, filter="fully_trusted")


def _inside(root: Path, rel: str) -> Path:
    path = (root / rel)
    if os.path.isabs(rel) or ".." in Path(rel).parts:
        raise InvalidArgument(f"stream names a path outside its file system: {rel!r}")
    return path
