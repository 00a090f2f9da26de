"""Checks that a shared path really lies inside its file system."""

from __future__ import annotations

import os

from .errors import FilesystemMissing, PathOutsideFilesystem


def resolve_share_path(fs_root: str | os.PathLike, path: str | os.PathLike | None = None) -> str:
    """Return the real path of ``path`` (absolute, or relative to ``fs_root``) inside ``fs_root``.

    Symlinks and ``..`` are resolved on both sides before comparing, so a symlink that points
    out of the file system, or ``../other``, is refused with :class:`PathOutsideFilesystem`.
    A missing root or path (a deleted file system) raises :class:`FilesystemMissing`.
    """
    root = os.fspath(fs_root)
    if not os.path.isdir(root):
        raise FilesystemMissing(f"file system root {root!r} does not exist (was it deleted?)")
    real_root = os.path.realpath(root)
    target = os.fspath(path) if path is not None else real_root
    if not os.path.isabs(target):
        target = os.path.join(real_root, target)
    real_target = os.path.realpath(target)
    if os.path.commonpath([real_root, real_target]) != real_root:
        raise PathOutsideFilesystem(
            f"path {os.fspath(path)!r} resolves to {real_target!r}, which is outside the "
            f"file system {real_root!r}; share a directory inside it")
    if not os.path.isdir(real_target):
        raise FilesystemMissing(f"shared path {real_target!r} does not exist or is not a directory")
    return real_target
