"""What both supervisors share: one child process (see :mod:`plumbing.process`)."""

from __future__ import annotations

import shutil

from plumbing.process import Child, ChildFailed, log_tail

from .errors import DaemonStartError


def require_binary(name: str) -> str:
    """Return the full path of ``name`` or raise DaemonStartError saying what to install."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not found:
        raise DaemonStartError(
            f"{name} is not installed (Debian: nfs-ganesha nfs-ganesha-vfs for ganesha.nfsd; "
            "samba smbclient for smbd, testparm, smbcontrol, smbpasswd)")
    return found


class ChildDaemon:
    """A daemon started by us as a foreground child; ``stop`` only ever signals that child."""

    name = "daemon"

    def __init__(self) -> None:
        self._child: Child | None = None

    @property
    def pid(self) -> int | None:
        """PID of the child we started, or None."""
        return self._child.pid if self._child else None

    def is_running(self) -> bool:
        """True while the child we started is alive."""
        return self._child is not None and self._child.running()

    def _spawn(self, argv: list[str], log_path: str, env: dict | None = None) -> None:
        if self.is_running():
            raise DaemonStartError(f"{self.name} is already running (pid {self.pid})")
        # Own session: smbd signals its whole process group on shutdown, which must be its
        # own children, never the caller.
        self._child = Child(self.name, argv, log_path, env=env).start()

    def _wait_until(self, ready, timeout: float, what: str, log_path: str) -> None:
        try:
            self._child.wait_ready(ready, timeout, what)
        except ChildFailed as exc:
            raise DaemonStartError(f"{exc}; see {log_path}:\n{log_tail(log_path)}") from None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to our child (never to anything else)."""
        if not self.is_running():
            raise DaemonStartError(f"{self.name} is not running")
        self._child.send_signal(signum)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child we started: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        child, self._child = self._child, None
        if child is not None:
            child.stop(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

