"""Atomic config file writes."""

from __future__ import annotations

import os
import tempfile


def write_if_changed(path: str | os.PathLike, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path`` atomically, only if the content (or mode) differs.

    The new content goes to a temporary file in the same directory, is fsynced, then renamed
    over ``path`` (and the directory is fsynced), so a reader sees either the old or the new
    file, never a partial one. Returns True when the file was (re)written.
    """
    path = os.fspath(path)
    data = text.encode("utf-8")
    try:
        with open(path, "rb") as current:
            same = current.read() == data
        if same and (os.stat(path).st_mode & 0o7777) == mode:
            return False
    except FileNotFoundError:
        pass
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True
