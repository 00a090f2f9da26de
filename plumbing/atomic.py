"""Durable atomic file writes: a reader sees the old content or the new, never a part, and
after return the new content survives a crash (file and directory fsynced)."""
import json
import os
import tempfile


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or create inside ``path`` durable."""
    fd = os.open(os.fspath(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes | str, mode: int = 0o644, *,
                 make_dirs: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, fsynced,
    renamed over ``path``; then fsync the directory. ``mode`` applies before the rename, so a
    secret is never readable by others, not even for a moment. With ``make_dirs`` False a
    missing directory is FileNotFoundError (it was removed: do not bring it back)."""
    path = os.fspath(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = os.path.dirname(os.path.abspath(path))
    if make_dirs:
        os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)


def write_json_atomic(path: str | os.PathLike, obj, mode: int = 0o644, *,
                      make_dirs: bool = True, **dump_args) -> None:
    """`write_atomic` of ``obj`` as JSON (``dump_args`` go to `json.dumps`)."""
    write_atomic(path, json.dumps(obj, **dump_args), mode, make_dirs=make_dirs)


def write_if_changed(path: str | os.PathLike, data: bytes | str, mode: int = 0o644) -> bool:
    """`write_atomic` only when the content or mode differs; True when the file was written."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(path, "rb") as current:
            if current.read() == raw and (os.stat(path).st_mode & 0o7777) == mode:
                return False
    except FileNotFoundError:
        pass
    write_atomic(path, raw, mode)
    return True
