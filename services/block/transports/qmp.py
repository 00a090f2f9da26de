"""A small synchronous QMP client (QEMU Machine Protocol) over a unix socket.

QMP is line-delimited JSON: the server greets with {"QMP": ...}, the client sends
{"execute": "qmp_capabilities"}, then commands; replies are {"return": ...} or
{"error": {"class": ..., "desc": ...}}; asynchronous {"event": ...} messages may arrive
at any time and are kept in ``events``.
"""

from __future__ import annotations

import json
import socket
import threading
import time

from plumbing.errors import Unavailable

from .base import DaemonError, TransportError


class QMPError(TransportError, Unavailable):
    """QEMU refused a command; ``qmp_class`` is QEMU's error class (e.g. GenericError)."""

    code = "command_failed"

    def __init__(self, command: str, qmp_class: str, desc: str):
        self.command = command
        self.qmp_class = qmp_class
        self.desc = desc
        super().__init__(f"qemu-storage-daemon refused {command}: {desc} ({qmp_class})")


class QMPClient:
    """Connect to a QMP socket, negotiate capabilities, and run commands one at a time."""

    def __init__(self, path: str, timeout: float = 30.0):
        self.path = path
        self.timeout = timeout
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._buf = b""

    def connect(self, retry_for: float = 10.0) -> dict:
        """Connect (retrying while the daemon starts), read the greeting, send qmp_capabilities."""
        deadline = time.monotonic() + retry_for
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.path)
                break
            except OSError as exc:
                sock.close()
                if time.monotonic() > deadline:
                    raise DaemonError(f"cannot connect to QMP socket {self.path}: {exc}") from exc
                time.sleep(0.05)
        self._sock = sock
        greeting = self._read_message()
        if "QMP" not in greeting:
            raise DaemonError(f"unexpected QMP greeting on {self.path}: {greeting!r}")
        self.execute("qmp_capabilities")
        return greeting

    def close(self) -> None:
        """Close the socket (the daemon keeps running)."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _read_message(self) -> dict:
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(65536)
            except OSError as exc:
                raise DaemonError(f"QMP socket {self.path}: {exc}") from exc
            if not chunk:
                raise DaemonError(f"QMP socket {self.path} closed by qemu-storage-daemon")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError as exc:
            raise DaemonError(f"malformed QMP message: {line[:200]!r}") from exc

    def execute(self, command: str, arguments: dict | None = None):
        """Run one command; return its "return" value or raise QMPError."""
        if self._sock is None:
            raise DaemonError("QMP client is not connected")
        msg = {"execute": command}
        if arguments:
            msg["arguments"] = arguments
        with self._lock:
            try:
                self._sock.sendall(json.dumps(msg).encode() + b"\n")
            except OSError as exc:
                raise DaemonError(f"QMP socket {self.path}: {exc}") from exc
            while True:
                reply = self._read_message()
                if "event" in reply:
                    self.events.append(reply)
                    continue
                if "error" in reply:
                    err = reply["error"]
                    raise QMPError(command, err.get("class", "?"), err.get("desc", "?"))
                if "return" in reply:
                    return reply["return"]
                raise DaemonError(f"unexpected QMP reply to {command}: {reply!r}")

    def wait_event(self, name: str, match=lambda data: True, timeout: float = 10.0) -> dict:
        """Wait for an event (already received or arriving) whose data satisfies ``match``."""
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if ev.get("event") == name and match(ev.get("data", {})):
                    return self.events.pop(i)
            if time.monotonic() > deadline:
                raise DaemonError(f"timed out waiting for QMP event {name}")
            with self._lock:
                self._sock.settimeout(max(0.05, deadline - time.monotonic()))
                try:
                    self.events.append(self._read_message())
                except DaemonError:
                    if time.monotonic() > deadline:
                        raise
                finally:
                    self._sock.settimeout(self.timeout)
