"""Which Debian package has each program a Strata daemon needs, and what to say when one is
missing (``strata up`` leaves the daemon out; a transport asked to start it raises)."""
from __future__ import annotations

import os
import shutil

PACKAGE = {
    "tgtd": "tgt", "tgtadm": "tgt",                           # iSCSI
    "qemu-storage-daemon": "qemu-system-common",              # NBD, vhost-user-blk
}


def not_installed(*programs: str) -> str:
    """'' when every one of ``programs`` is on PATH, else what is missing and what to install,
    e.g. 'tgtd, tgtadm is not installed (apt-get install tgt)'."""
    absent = [p for p in programs if shutil.which(p) is None]
    if not absent:
        return ""
    packages = sorted({PACKAGE.get(os.path.basename(p), os.path.basename(p)) for p in absent})
    return f"{', '.join(absent)} is not installed (apt-get install {' '.join(packages)})"
