"""Bind mounts that let NFS-Ganesha's VFS serve btrfs subvolumes and snapshots.

Ganesha (Debian 4.3 build) does not enumerate btrfs subvolumes ("may have unsupported
subvols"): a subvolume that is not a mount point cannot be exported (ENOENT) and crossing
into one returns NFS4ERR_XDEV. Bind-mounting each file system subvolume onto itself, and
each snapshot read-only onto itself, makes them mounts Ganesha knows. Needs root.
"""

from __future__ import annotations

import os
import subprocess

from .errors import CommandError


def is_mount_point(path: str) -> bool:
    """True if ``path`` is listed as a mount point in /proc/self/mountinfo."""
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == real for line in f)


def bind_mount_self(path: str, read_only: bool = False) -> bool:
    """Bind-mount ``path`` onto itself (read-only if asked); False if it already is a mount."""
    if is_mount_point(path):
        return False
    argv = ["mount", "--bind"] + (["-o", "ro"] if read_only else []) + [path, path]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise CommandError(f"mount --bind {path} failed: {done.stderr.strip()}")
    return True


def unmount(path: str) -> None:
    """Unmount ``path`` if it is a mount point."""
    if is_mount_point(path):
        done = subprocess.run(["umount", path], check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise CommandError(f"umount {path} failed: {done.stderr.strip()}")
