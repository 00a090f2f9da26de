"""Mountpoints that cannot be written while nothing is mounted on them.

A pool's mountpoint is a directory on the disk below it. While the pool is not mounted (after
a restart, before its ceph-fuse is back, after that died), a write meant for the pool would
land in that directory, on the root disk, and vanish from view once the pool is mounted over
it. So the directory is made immutable (``chattr +i``): nothing, root included, can create
anything in it, and a mount on top of it works as before.
"""
from __future__ import annotations

from pathlib import Path

from .runner import Runner


def guard_mountpoint(runner: Runner, where: Path) -> None:
    """Make the (empty, unmounted) mountpoint directory immutable; where the file system
    below has no such flag, leave it as it is."""
    runner.run(["chattr", "+i", str(where)], check=False)


def unguard_mountpoint(runner: Runner, where: Path) -> None:
    """Before the mountpoint directory itself is removed."""
    if where.is_dir():
        runner.run(["chattr", "-i", str(where)], check=False)
