"""Files other processes change, noticed without a system call per request: Linux inotify
(libc, through ctypes) read on the event loop.

Every request used to ``stat`` the config file and ``fstat`` the settings generation
(:class:`.shared.Generation`) to see whether another process had changed them: two system
calls per request, for files that change a few times a day. Now each file has a
:class:`Watch` whose ``events`` counter the loop raises when the kernel reports a change;
its reader checks the file only when :meth:`Watch.changed` says the counter moved.

No change is seen late: the kernel queues the event inside the writer's ``rename`` or
``write``, before the writer can tell anyone (its client, the next request). When the next
request's bytes arrive, the inotify descriptor is already readable, and the loop runs every
readable descriptor's callback (this one included) before the request's handler, which runs
as a task one loop step later. That order holds for what a request learns from its client;
a process that learns of a change otherwise, by taking a lock the writer released after
writing, reads the file itself (``Generation.changes(look=True)``): the event may be unread.

Without inotify (another OS; the per-user limit of instances or watches reached)
:func:`start` answers None, and the readers check the file on every request, as before.
"""
from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import struct

log = logging.getLogger("strata.s3.watch")

MODIFY, ATTRIB, CLOSE_WRITE, MOVED_TO, CREATE, DELETE = 0x2, 0x4, 0x8, 0x80, 0x100, 0x200
DELETE_SELF, MOVE_SELF, Q_OVERFLOW, MASK_ADD = 0x400, 0x800, 0x4000, 0x20000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name

try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _init1, _add_watch = _libc.inotify_init1, _libc.inotify_add_watch
    _add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
except (OSError, AttributeError):  # not Linux
    _init1 = _add_watch = None


class Watch:
    """Events seen for one file (``events`` only grows), for one reader."""

    __slots__ = ("name", "events", "seen")

    def __init__(self, name: bytes | None):
        self.name = name     # the file's name in a watched directory; None: the file itself
        self.events = 0
        self.seen = -1       # ``events`` at the last changed() that answered True

    def changed(self) -> bool:
        """Whether an event came since the last call answered True (the first call: True);
        then the caller looks at the file. Taken before the look, so a change during it
        is reported next."""
        if self.events == self.seen:
            return False
        self.seen = self.events
        return True


class Notifier:
    """One inotify instance, read by the event loop it was started on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int):
        self.loop = loop
        self.fd = fd
        self._watches: dict[int, list[Watch]] = {}
        loop.add_reader(fd, self._read)

    def watch_file(self, path: str) -> Watch | None:
        """Count writes to ``path`` (a file that is written in place, never replaced)."""
        return self._add(path, MODIFY | ATTRIB | DELETE_SELF | MOVE_SELF, None)

    def watch_name(self, path: str) -> Watch | None:
        """Count changes of whatever file is at ``path`` (one replaced by a rename, too; one
        edited in place counts when its writer closes it). Not every write: a busy file in
        the same directory, a log, would wake the loop for each of its writes."""
        directory, name = os.path.split(os.path.abspath(path))
        return self._add(directory, CLOSE_WRITE | MOVED_TO | CREATE | DELETE | ATTRIB, os.fsencode(name))

    def _add(self, path: str, mask: int, name: bytes | None) -> Watch | None:
        wd = _add_watch(self.fd, os.fsencode(path), mask | MASK_ADD)
        if wd < 0:
            log.warning("cannot watch %s (%s): checking it on every request", path,
                        os.strerror(ctypes.get_errno()))
            return None
        watch = Watch(name)
        self._watches.setdefault(wd, []).append(watch)
        return watch

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError as exc:  # cannot happen short of a kernel bug: every file counts as changed
                log.error("reading inotify events: %s", exc)
                self._all_changed()
                return
            pos = 0
            while pos + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
                name = data[pos + _EVENT.size:pos + _EVENT.size + length].split(b"\0", 1)[0]
                pos += _EVENT.size + length
                if mask & Q_OVERFLOW:
                    self._all_changed()
                    continue
                for watch in self._watches.get(wd, ()):
                    if watch.name is None or watch.name == name:
                        watch.events += 1

    def _all_changed(self) -> None:
        for watches in self._watches.values():
            for watch in watches:
                watch.events += 1

    def close(self) -> None:
        """Stop reading and close the instance (its watches count nothing from now on:
        their readers must stop relying on them first)."""
        self.loop.remove_reader(self.fd)
        os.close(self.fd)


def start(loop: asyncio.AbstractEventLoop) -> Notifier | None:
    """A notifier on ``loop``, or None where inotify is not available (logged)."""
    if _init1 is None:
        return None
    fd = _init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        log.warning("no inotify (%s): files are checked on every request", os.strerror(err or errno.ENOSYS))
        return None
    return Notifier(loop, fd)
