"""POSIX ACLs on a directory, written as the kernel's ``system.posix_acl_*`` extended
attributes (no `setfacl` needed): :func:`grant_users` gives named Unix users read, write and
search on a directory, and makes what is created inside it inherit that (default ACL).

The xattr is a little-endian header (version 2) and entries ``(tag u16, perm u16, id u32)``
sorted by tag, then id (``linux/posix_acl_xattr.h``). btrfs and ext4 keep them; a file system
without ACLs answers EOPNOTSUPP, raised as :class:`AclUnsupported`.
"""
from __future__ import annotations

import errno
import os
import stat
import struct

ACCESS, DEFAULT = "system.posix_acl_access", "system.posix_acl_default"
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF
RWX = 7


class AclUnsupported(OSError):
    """The file system holding the directory keeps no POSIX ACLs."""


def _decode(raw: bytes) -> dict[tuple[int, int], int]:
    if len(raw) < 4 or struct.unpack_from("<I", raw)[0] != VERSION:
        return {}
    return {(tag, ident): perm for tag, perm, ident in struct.iter_unpack("<HHI", raw[4:])}


def _encode(entries: dict[tuple[int, int], int]) -> bytes:
    return struct.pack("<I", VERSION) + b"".join(
        struct.pack("<HHI", tag, perm, ident) for (tag, ident), perm in sorted(entries.items()))


def _read(path: str, name: str) -> dict[tuple[int, int], int]:
    try:
        return _decode(os.getxattr(path, name))
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.EOPNOTSUPP):
            return {}
        raise


def _with_users(entries: dict, mode: int, uids: list[int]) -> dict:
    """``entries`` (or the ACL equivalent of ``mode``) plus rwx for each uid, and a mask
    letting named users have it."""
    acl = dict(entries) or {(USER_OBJ, UNDEFINED_ID): (mode >> 6) & RWX,
                            (GROUP_OBJ, UNDEFINED_ID): (mode >> 3) & RWX,
                            (OTHER, UNDEFINED_ID): mode & RWX}
    for uid in uids:
        acl[(USER, uid)] = RWX
    acl[(MASK, UNDEFINED_ID)] = RWX
    return acl


def grant_users(path: str, uids: list[int]) -> None:
    """Give each uid read, write and search on directory ``path``, now (access ACL) and on
    what is made inside it later (default ACL). Other entries and the owner's bits stay."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", path)
    try:
        for name in (ACCESS, DEFAULT):
            os.setxattr(path, name, _encode(_with_users(_read(path, name), st.st_mode, uids)))
    except OSError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            raise AclUnsupported(exc.errno, "the file system keeps no POSIX ACLs", path) from None
        raise


def users_granted(path: str) -> set[int]:
    """The uids the directory's access ACL names."""
    return {ident for (tag, ident) in _read(path, ACCESS) if tag == USER}
