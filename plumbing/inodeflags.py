"""A file's inode flags (``chattr``'s): set or clear one through ``FS_IOC_GETFLAGS`` and
``FS_IOC_SETFLAGS`` on an open descriptor."""
import fcntl
import struct

FS_IOC_GETFLAGS, FS_IOC_SETFLAGS = 0x80086601, 0x40086602
FS_IMMUTABLE_FL = 0x00000010     # chattr +i
FS_NOCOW_FL = 0x00800000         # chattr +C (btrfs: no copy-on-write; only on an empty file)


def set_flag(fd: int, flag: int, on: bool = True) -> bool:
    """Set (or clear) ``flag`` on the open file ``fd``; False when its file system or the
    caller cannot."""
    try:
        flags = struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0)))[0]
        flags = flags | flag if on else flags & ~flag
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", flags))
        return True
    except OSError:
        return False
