"""Pools on this host's own disks.

- :mod:`.driver` and :mod:`.pools`: the ``local`` driver (btrfs over block devices or image
  files): file systems are subvolumes, volumes sparse files with reflink snapshots.
- :mod:`.directory`: the ``directory`` fallback (plain directories, no root or btrfs needed).
- :mod:`.layout`: the on-pool layout and records both drivers share.
- :mod:`.btrfs`, :mod:`.scrub`, :mod:`.sendstream`: btrfs tools, paced scrub, send-stream checks.
- :mod:`.devices`, :mod:`.loopdev`: device specs and image files on loop devices.
"""

from .directory import DirectoryDriver
from .driver import LocalDriver

__all__ = ["DirectoryDriver", "LocalDriver"]
