"""Image devices: sparse files under ``<state_dir>/devices`` attached with ``losetup``."""

import json
import os
from pathlib import Path
from typing import Optional

from ..errors import CommandFailed, InUse
from ..runner import Runner


def create_image(path: Path, size_bytes: int) -> None:
    """Create a sparse image file of ``size_bytes``; InUse if the file already exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise InUse(f"image file {path} already exists (left by another pool?); "
                    "remove it or pick another pool name") from None
    try:
        os.ftruncate(fd, size_bytes)
    finally:
        os.close(fd)


def list_loops(runner: Runner) -> list:
    """Attached loop devices as ``[(device, backing file or None)]``."""
    out = runner.run(["losetup", "--list", "--json", "-O", "NAME,BACK-FILE"]).stdout
    if not out.strip():
        return []
    result = []
    for dev in json.loads(out).get("loopdevices", []):
        back = dev.get("back-file")
        if back and back.endswith(" (deleted)"):
            back = back[: -len(" (deleted)")]
        result.append((dev["name"], back))
    return result


def loops_for(runner: Runner, image: Path) -> list:
    """Loop devices currently backed by ``image``."""
    target = os.path.realpath(image)
    return [dev for dev, back in list_loops(runner)
            if back and os.path.realpath(back) == target]


def attach(runner: Runner, image: Path) -> str:
    """Attach ``image`` to a free loop device (reusing one already attached) and return it."""
    existing = loops_for(runner, image)
    if existing:
        return existing[0]
    try:
        return runner.run(["losetup", "--find", "--show", "--direct-io=on",
                           str(image)]).stdout.strip()
    except CommandFailed as exc:
        if "direct" not in exc.stderr.lower() and "invalid argument" not in exc.stderr.lower():
            raise
    # Some backing file systems refuse direct I/O; buffered loops still work.
    return runner.run(["losetup", "--find", "--show", str(image)]).stdout.strip()


def detach(runner: Runner, device: Optional[str]) -> None:
    """Detach a loop device; a device already gone is fine."""
    if not device:
        return
    try:
        runner.run(["losetup", "--detach", device])
    except CommandFailed as exc:
        if "No such device" in exc.stderr or "No such device or address" in exc.stderr:
            return
        raise


def device_size(path: str) -> int:
    """Size in bytes of a block device or file (0 when it cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)
