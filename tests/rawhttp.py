"""Raw sockets against Strata's HTTP servers (the S3 port and the API port), for what no HTTP
client sends: heads too long, heads that never end, bodies that stop, many idle connections.
Every wait is bounded (``timeout``) and generous: the machine is shared."""
from __future__ import annotations

import selectors
import socket
import threading
import time


def connect(port: int, source: str | None = None, timeout: float = 10.0) -> socket.socket:
    """A connection to 127.0.0.1:``port`` from ``source`` (another loopback address, such as
    127.0.0.2, to be another client as the server sees it)."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                    source_address=(source, 0) if source else None)


def send_until_answered(sock: socket.socket, head: bytes, filler: bytes, total: int) -> int:
    """Send ``head``, then ``filler`` again and again up to ``total`` bytes, until the server
    answers or stops taking them; the bytes sent."""
    sock.sendall(head)
    sent = len(head)
    while sent < total:
        if select_readable(sock, 0):
            break
        try:
            sock.sendall(filler)
        except (BrokenPipeError, ConnectionResetError):
            break
        sent += len(filler)
    return sent


def read_answer(sock: socket.socket, timeout: float = 30.0) -> bytes:
    """Everything the server sends until it closes the connection (or ``timeout``: then
    AssertionError)."""
    sock.settimeout(timeout)
    data = b""
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = sock.recv(65536)
        except ConnectionResetError:
            return data
        except socket.timeout:
            raise AssertionError(f"the server neither answered nor closed within {timeout} s "
                                 f"(got {data[:200]!r})") from None
        if not got:
            return data
        data += got
        if time.monotonic() > deadline:
            raise AssertionError(f"the server kept sending for {timeout} s")


def status_of(answer: bytes) -> int:
    """The status code of a raw HTTP answer (0: none)."""
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def header_of(answer: bytes, name: str) -> str | None:
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    for line in head.split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def body_of(answer: bytes) -> bytes:
    return answer.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in answer else b""


def closed_within(sock: socket.socket, timeout: float) -> bool:
    """Whether the server closes ``sock`` (whatever it sends first) within ``timeout`` s."""
    try:
        read_answer(sock, timeout)
        return True
    except AssertionError:
        return False


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), KiB."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def select_readable(sock: socket.socket, timeout: float) -> bool:
    """Whether ``sock`` has something to read (an answer, or its end) within ``timeout`` s.
    epoll, not select(2): a busy test worker's descriptors pass 1024."""
    with selectors.DefaultSelector() as sel:
        sel.register(sock, selectors.EVENT_READ)
        return bool(sel.select(timeout))


def still_open(socks: list[socket.socket], timeout: float) -> list[socket.socket]:
    """Read every socket (answers are dropped) until the server has closed each, or
    ``timeout`` s passed; those it has not closed by then."""
    waiting = set(socks)
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        for sock in socks:
            sel.register(sock, selectors.EVENT_READ)
        while waiting and time.monotonic() < deadline:
            for key, _ in sel.select(min(1.0, max(0.0, deadline - time.monotonic()))):
                sock = key.fileobj
                try:
                    if sock.recv(65536, socket.MSG_DONTWAIT):
                        continue
                except BlockingIOError:
                    continue
                except OSError:  # reset: closed too
                    pass
                waiting.discard(sock)
                sel.unregister(sock)
    return [s for s in socks if s in waiting]


class Trickle:
    """A thread sending ``head`` a byte a second on every socket of ``socks`` (slowloris),
    until ``stop()``; a context manager."""

    def __init__(self, socks: list[socket.socket], head: bytes):
        self.socks, self.head = socks, head
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for byte in self.head:
            for sock in self.socks:
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    pass
            if self.stopped.wait(1.0):
                return

    def __enter__(self) -> "Trickle":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.thread.join(10)
