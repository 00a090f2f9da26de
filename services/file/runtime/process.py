"""What both supervisors share: one child process, its log, and waiting for a TCP port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

from .errors import DaemonStartError


def require_binary(name: str) -> str:
    """Return the full path of ``name`` or raise DaemonStartError saying what to install."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")
    if not found:
        raise DaemonStartError(
            f"{name} is not installed (Debian: nfs-ganesha nfs-ganesha-vfs for ganesha.nfsd; "
            "samba smbclient for smbd, testparm, smbcontrol, smbpasswd)")
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that is free on ``host`` right now (for tests and benchmarks)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def probe_address(bind_address: str) -> str:
    """The address to health-check a daemon bound to ``bind_address`` (0.0.0.0 -> loopback)."""
    return "127.0.0.1" if bind_address in ("0.0.0.0", "", "*") else bind_address


class ChildDaemon:
    """A daemon started by us as a foreground child; ``stop`` only ever signals that child."""

    name = "daemon"

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._log = None

    @property
    def pid(self) -> int | None:
        """PID of the child we started, or None."""
        return self._proc.pid if self._proc else None

    def is_running(self) -> bool:
        """True while the child we started is alive."""
        return self._proc is not None and self._proc.poll() is None

    def _spawn(self, argv: list[str], log_path: str, env: dict | None = None) -> None:
        if self.is_running():
            raise DaemonStartError(f"{self.name} is already running (pid {self.pid})")
        # stays open while the child runs; closed in stop()
        self._log = open(log_path, "ab")  # noqa: SIM115
        # Own session: smbd signals its whole process group on shutdown, which must be its
        # own children, never the caller.
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, env=env, close_fds=True,
                                      start_new_session=True)

    def _wait_until(self, ready, timeout: float, what: str, log_path: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                code = self._proc.returncode if self._proc else None
                raise DaemonStartError(f"{self.name} exited with status {code} while {what}; "
                                       f"see {log_path}:\n{tail(log_path)}")
            if ready():
                return
            time.sleep(0.05)
        raise DaemonStartError(f"{self.name} not ready after {timeout:.0f}s ({what}); "
                               f"see {log_path}:\n{tail(log_path)}")

    def signal(self, signum: int) -> None:
        """Send ``signum`` to our child (never to anything else)."""
        if not self.is_running():
            raise DaemonStartError(f"{self.name} is not running")
        self._proc.send_signal(signum)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child we started: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        proc, self._proc = self._proc, None
        try:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        finally:
            if self._log:
                self._log.close()
                self._log = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True if a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: str, lines: int = 15) -> str:
    """Last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
    except OSError:
        return ""
