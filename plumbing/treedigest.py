"""The tree digest: one SHA-256 over a file or a directory tree's content, permissions and
links, so that a copy (a restore, a tier move, a replica) can be proved equal to its source
without comparing the two side by side."""
import hashlib
import os
import stat
from pathlib import Path

SNAPSHOTS_DIR = ".snapshots"  # a file system's snapshots, not part of its content


def file_sha256(path) -> str:
    """SHA-256 of a file's bytes, read 1 MiB at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def tree_digest(root) -> str:
    """SHA-256 over a file's bytes, or over a directory tree: every entry's relative path,
    type, permission bits, and content (files) or target (symlinks), in sorted order. The
    top-level ``.snapshots`` directory is not part of a file system's content."""
    root = Path(root)
    if root.is_file():
        return file_sha256(root)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d != SNAPSHOTS_DIR]
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            rel = str(rel_dir / name)
            st = path.lstat()
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                line = f"L {rel} {os.readlink(path)}"
            elif stat.S_ISDIR(st.st_mode):
                line = f"D {rel} {mode:o}"
            elif stat.S_ISREG(st.st_mode):
                line = f"F {rel} {mode:o} {st.st_size} {file_sha256(path)}"
            else:
                line = f"O {rel} {mode:o} {stat.S_IFMT(st.st_mode)}"
            h.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()
