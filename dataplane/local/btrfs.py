"""Thin wrappers around the btrfs command-line tools (btrfs-progs 6.2 and later)."""

import fcntl
import os
import re
import struct
import uuid as _uuid
from pathlib import Path
from typing import Optional

from ..errors import CommandFailed
from ..runner import Runner

# redundancy -> (data profile, metadata profile)
PROFILES = {
    "none": ("single", "dup"),
    "mirror": ("raid1", "raid1"),
    "mirror3": ("raid1c3", "raid1c3"),
    "raid10": ("raid10", "raid10"),
}
SUBVOLUME_ROOT_INO = 256  # every btrfs subvolume root has this inode number
# _IOWR(0x94, 37, struct btrfs_ioctl_received_subvol_args): 200 bytes = uuid[16], stransid,
# rtransid, stime{u64,u32}+pad, rtime{u64,u32}+pad, flags, reserved[16]
IOC_SET_RECEIVED_SUBVOL = 0xC0C89425
RECEIVED_SUBVOL_ARGS = 200
FICLONE = 0x40049409


def mkfs(runner: Runner, devices: list, redundancy: str, label: str) -> None:
    """Make a btrfs file system over ``devices`` (refuses devices with a signature)."""
    data, meta = PROFILES[redundancy]
    runner.run(["mkfs.btrfs", "-q", "-L", label[:255], "-d", data, "-m", meta, *devices])


def mount(runner: Runner, device: str, mountpoint: Path, degraded: bool = False) -> None:
    """Mount the btrfs holding ``device`` at ``mountpoint``."""
    opts = "noatime,degraded" if degraded else "noatime"
    runner.run(["mount", "-t", "btrfs", "-o", opts, device, str(mountpoint)])


def umount(runner: Runner, mountpoint: Path) -> None:
    """Unmount ``mountpoint``."""
    runner.run(["umount", str(mountpoint)])


def is_mounted(mountpoint: Path) -> bool:
    """Whether something is mounted exactly at ``mountpoint``."""
    target = os.path.realpath(mountpoint)
    return target in mount_points()


def mount_points() -> dict:
    """Mounted paths -> (fstype, source), from /proc/self/mountinfo."""
    result = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            rfields = right.split()
            if len(fields) >= 5 and len(rfields) >= 2:
                path = fields[4].replace("\\040", " ")
                result[path] = (rfields[0], rfields[1])
    return result


def device_scan(runner: Runner, device: Optional[str] = None) -> None:
    """Register btrfs member devices with the kernel."""
    runner.run(["btrfs", "device", "scan"] + ([device] if device else []), check=False)


def forget(runner: Runner, device: str) -> None:
    """Make the kernel forget an unmounted member device (before detaching its loop)."""
    runner.run(["btrfs", "device", "scan", "--forget", device], check=False)


def filesystem_show(runner: Runner, mountpoint: Path) -> dict:
    """``{"uuid": ..., "devices": [{"devid", "size", "path" or None if missing}]}``."""
    out = runner.run(["btrfs", "filesystem", "show", "--raw", str(mountpoint)]).stdout
    info = {"uuid": None, "devices": [], "missing": "missing" in out.lower()}
    m = re.search(r"uuid:\s*([0-9a-f-]{36})", out)
    if m:
        info["uuid"] = m.group(1)
    for m in re.finditer(r"devid\s+(\d+)\s+size\s+(\d+)\s+used\s+\d+\s+path\s*(.*)", out):
        path = m.group(3).strip()
        missing = (not path) or "MISSING" in path or "<missing" in path
        info["devices"].append({"devid": int(m.group(1)), "size": int(m.group(2)),
                                "path": None if missing else path.split()[0]})
    return info


def device_errors(runner: Runner, mountpoint: Path) -> dict:
    """Sum of the error counters of each member: ``{path or "devid:N": count}``."""
    out = runner.run(["btrfs", "device", "stats", str(mountpoint)], check=False).stdout
    errors = {}
    for m in re.finditer(r"^\[(.+?)\]\.\w+\s+(\d+)", out, re.MULTILINE):
        errors[m.group(1)] = errors.get(m.group(1), 0) + int(m.group(2))
    return errors


def quota_enable(runner: Runner, mountpoint: Path) -> None:
    """Turn on qgroup quotas."""
    runner.run(["btrfs", "quota", "enable", str(mountpoint)])


def subvolume_create(runner: Runner, path: Path) -> None:
    """Create an empty subvolume at ``path``."""
    runner.run(["btrfs", "subvolume", "create", str(path)])


def subvolume_delete(runner: Runner, path: Path) -> None:
    """Delete the subvolume at ``path`` (it must hold no nested subvolume)."""
    runner.run(["btrfs", "subvolume", "delete", str(path)])


def snapshot(runner: Runner, source: Path, dest: Path, readonly: bool) -> None:
    """Snapshot subvolume ``source`` to ``dest`` (read-only or writable)."""
    argv = ["btrfs", "subvolume", "snapshot"] + (["-r"] if readonly else [])
    runner.run(argv + [str(source), str(dest)])


# commands of `btrfs receive --dump` that change a path (utimes only follows changes)
_DUMP_CHANGES = {"mkfile", "mkdir", "mknod", "mkfifo", "mksock", "symlink", "rename", "link",
                 "unlink", "rmdir", "write", "update_extent", "clone", "truncate", "chmod",
                 "chown", "set_xattr", "remove_xattr", "fallocate", "fileattr",
                 "encoded_write"}
_DUMP_LINE = re.compile(r"^(\S+)\s+((?:\\.|\S)+)(?:.*?\bdest=((?:\\.|\S)+))?")
_TEMP_NAME = re.compile(r"^o\d+-\d+-\d+$")


def changed_paths(dump: str, skip: str = "") -> list:
    """Paths (relative to the subvolume, sorted) that the commands of a ``btrfs receive
    --dump`` of an incremental stream create, write, remove, rename or re-permission; the
    send's temporary names (``o<ino>-<gen>-<n>``) stand for the names they are renamed to,
    and paths under ``skip`` are left out."""
    out = set()
    for line in dump.splitlines():
        m = _DUMP_LINE.match(line)
        if not m or m.group(1) not in _DUMP_CHANGES:
            continue
        for raw in (m.group(2), m.group(3)):
            if not raw:
                continue
            parts = re.sub(r"\\(.)", r"\1", raw).split("/")[2:]  # ./<snapshot>/...
            if not parts or _TEMP_NAME.match(parts[-1]) or (skip and parts[0] == skip):
                continue
            out.add("/".join(parts))
    return sorted(out)


def set_readonly(runner: Runner, path: Path, readonly: bool) -> None:
    """Set a subvolume's ro property."""
    runner.run(["btrfs", "property", "set", "-ts", str(path), "ro",
                "true" if readonly else "false"])


def subvolume_show(runner: Runner, path: Path) -> dict:
    """``{"uuid", "received_uuid" (None if not received), "generation"}`` of a subvolume.

    ``btrfs receive`` finds the parent of an incremental stream by the UUID the sender puts
    in it: the sender's parent's received UUID if it has one, else its own UUID."""
    out = runner.run(["btrfs", "subvolume", "show", str(path)]).stdout

    def field(label):
        m = re.search(rf"^\s*{label}:\s*(\S+)", out, re.MULTILINE)
        return m.group(1) if m and m.group(1) != "-" else None
    return {"uuid": field("UUID"), "received_uuid": field("Received UUID"),
            "generation": int(field("Generation") or 0)}


def set_received_uuid(path: Path, received_uuid: str, stransid: int) -> None:
    """Mark a writable subvolume as received from ``received_uuid`` (what ``btrfs receive``
    does before it sets the subvolume read-only): incremental streams whose parent carries
    that UUID then find this subvolume as their parent. There is no command for this."""
    args = bytearray(RECEIVED_SUBVOL_ARGS)
    args[0:16] = _uuid.UUID(received_uuid).bytes
    struct.pack_into("<Q", args, 16, stransid)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.ioctl(fd, IOC_SET_RECEIVED_SUBVOL, args)
    finally:
        os.close(fd)


def clone_file_into(src: Path, dst: Path) -> None:
    """Make file ``dst`` share all of ``src``'s extents, in place (same inode, so a daemon
    that holds ``dst`` open sees the new content); ``dst`` takes ``src``'s size."""
    with open(src, "rb") as fsrc, open(dst, "r+b") as fdst:
        # both ranges must end at EOF for btrfs to clone a last partial block
        os.ftruncate(fdst.fileno(), os.fstat(fsrc.fileno()).st_size)
        fcntl.ioctl(fdst.fileno(), FICLONE, fsrc.fileno())
        os.fsync(fdst.fileno())


def is_subvolume(path: Path) -> bool:
    """Whether ``path`` is the root of a btrfs subvolume."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    import stat as _stat
    return _stat.S_ISDIR(st.st_mode) and st.st_ino == SUBVOLUME_ROOT_INO


def root_id(runner: Runner, path: Path) -> int:
    """The subvolume id (qgroup 0/id) of ``path``."""
    return int(runner.run(["btrfs", "inspect-internal", "rootid", str(path)]).stdout.strip())


def qgroup_limit(runner: Runner, path: Path, limit: Optional[int]) -> None:
    """Limit the referenced bytes of the subvolume at ``path`` (None removes the limit).

    The qgroup is named and the call made through the parent directory (in the pool's
    top-level subvolume): made through the subvolume itself, the ioctl's transaction reserves
    space in that subvolume, so a file system already at its limit could not have the limit
    raised or lifted (EDQUOT)."""
    qid = f"0/{root_id(runner, path)}"
    runner.run(["btrfs", "qgroup", "limit", "none" if limit is None else str(limit), qid,
                str(Path(path).parent)])


def qgroup_usage(runner: Runner, path: Path) -> tuple:
    """``(referenced bytes, max referenced or None)`` of the subvolume at ``path``."""
    qid = f"0/{root_id(runner, path)}"
    out = runner.run(["btrfs", "qgroup", "show", "-r", "--raw", str(path)]).stdout
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] == qid and len(fields) >= 4:
            limit = fields[3]
            return int(fields[1]), (None if limit == "none" else int(limit))
    return 0, None


# _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args): 1 KiB, max_id first
IOC_FS_INFO = 0x8400941F
# _IOWR(0x94, 29, struct btrfs_ioctl_scrub_args): 1 KiB = devid, start, end, flags, then
# struct btrfs_scrub_progress (15 u64: data_extents, tree_extents, data_bytes, tree_bytes, ...)
IOC_SCRUB_PROGRESS = 0xC400941D


def scrub_process(runner: Runner, mountpoint: Path, resume: bool = False, out=None,
                  err=None):
    """Start (or resume, from where a cancelled scrub stopped) a scrub at idle I/O priority
    (``-c 3``) in the foreground of a child process (``-B``), which ends with the scrub:
    finished, failed or cancelled. The caller owns the process."""
    import subprocess
    return runner.popen(["btrfs", "scrub", "resume" if resume else "start", "-B", "-c", "3",
                         str(mountpoint)], stdin=subprocess.DEVNULL,
                        stdout=out if out is not None else subprocess.DEVNULL,
                        stderr=err if err is not None else subprocess.DEVNULL)


def _fs_info(fd: int) -> bytearray:
    """The file system's ``btrfs_ioctl_fs_info_args`` (max_id at 0, fsid at 16)."""
    info = bytearray(1024)
    fcntl.ioctl(fd, IOC_FS_INFO, info, True)
    return info


def _fsid(mountpoint: Path) -> str:
    fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    try:
        info = _fs_info(fd)
    finally:
        os.close(fd)
    return str(_uuid.UUID(bytes=bytes(info[16:32])))


def scrub_speed_files(mountpoint: Path) -> list:
    """The kernel's per-device scrub rate limits (bytes/s, 0 = none) of the file system:
    ``/sys/fs/btrfs/<fsid>/devinfo/<devid>/scrub_speed_max`` (kernel 5.14 and later)."""
    return sorted(Path("/sys/fs/btrfs", _fsid(mountpoint), "devinfo").glob(
        "*/scrub_speed_max"))


def scrub_live_bytes(mountpoint: Path) -> Optional[int]:
    """Bytes (data and metadata) the running scrub has read so far on all devices, from
    the kernel (``btrfs scrub status`` shows figures up to a few seconds old); None when
    no scrub runs. A resumed scrub counts from 0 again."""
    import errno
    fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    try:
        max_id = struct.unpack_from("<Q", _fs_info(fd), 0)[0]
        total, running = 0, False
        for devid in range(1, max_id + 1):
            args = bytearray(1024)
            struct.pack_into("<Q", args, 0, devid)
            try:
                fcntl.ioctl(fd, IOC_SCRUB_PROGRESS, args, True)
            except OSError as exc:
                if exc.errno in (errno.ENOTCONN, errno.ENODEV):  # no scrub, no such device
                    continue
                raise
            data_bytes, tree_bytes = struct.unpack_from("<2Q", args, 32 + 16)
            total += data_bytes + tree_bytes
            running = True
        return total if running else None
    finally:
        os.close(fd)


def scrub_cancel(runner: Runner, mountpoint: Path) -> None:
    """Cancel a running scrub (no error when none runs)."""
    runner.run(["btrfs", "scrub", "cancel", str(mountpoint)], check=False)


def scrub_status(runner: Runner, mountpoint: Path) -> dict:
    """Raw scrub counters plus ``status`` ("running", "finished", "aborted", ...)."""
    out = runner.run(["btrfs", "scrub", "status", "-R", str(mountpoint)]).stdout
    status = {"status": "unknown"}
    m = re.search(r"Status:\s*(\w+)", out)
    if m:
        status["status"] = m.group(1).lower()
    for m in re.finditer(r"^\s*(\w+):\s+(\d+)\s*$", out, re.MULTILINE):
        status[m.group(1)] = int(m.group(2))
    return status


def used_bytes(runner: Runner, mountpoint: Path) -> int:
    """Bytes of data and metadata in use (what scrub will read, once per copy)."""
    try:
        out = runner.run(["btrfs", "filesystem", "usage", "-b", str(mountpoint)]).stdout
    except CommandFailed:
        return 0
    m = re.search(r"^\s*Used:\s+(\d+)", out, re.MULTILINE)
    return int(m.group(1)) if m else 0


def signature(runner: Runner, device: str) -> Optional[str]:
    """The file system or partition-table type found on ``device``, or None."""
    proc = runner.run(["blkid", "-p", "-o", "export", device], check=False)
    if proc.returncode != 0:
        return None
    fields = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return fields.get("TYPE") or fields.get("PTTYPE") or "unknown"


def wipe(runner: Runner, device: str) -> None:
    """Erase file system signatures from a real device the pool no longer uses."""
    runner.run(["wipefs", "--all", "--quiet", device], check=False)


def _mount_root(path: Path) -> Path:
    mnt = Path(path)
    while not is_mounted(mnt) and mnt.parent != mnt:
        mnt = mnt.parent
    return mnt


def child_subvolumes(runner: Runner, path: Path) -> list:
    """Subvolumes nested directly in the subvolume at ``path``, in creation order:
    ``[{"id", "path", "otime" (epoch seconds, snapshots only)}]``. Paths assume the pool is
    mounted at its top level, as the local driver mounts it."""
    import time as _time
    mnt = _mount_root(path)
    listing = re.compile(r"^ID (\d+) .*?(?:otime (\S+ \S+) )?path (.*)$")
    subs, otimes = {}, {}
    for argv_extra, store in (([], subs), (["-s"], otimes)):
        out = runner.run(["btrfs", "subvolume", "list", "-o", *argv_extra, str(path)]).stdout
        for line in out.splitlines():
            m = listing.match(line.strip())
            if not m:
                continue
            if store is subs:
                subs[int(m.group(1))] = mnt / m.group(3)
            elif m.group(2):
                otimes[int(m.group(1))] = _time.mktime(
                    _time.strptime(m.group(2), "%Y-%m-%d %H:%M:%S"))
    return [{"id": i, "path": subs[i], "otime": otimes.get(i)} for i in sorted(subs)]
