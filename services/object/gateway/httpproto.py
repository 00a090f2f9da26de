"""The HTTP protocol the gateway serves with: Strata's (:mod:`plumbing.http_protocol`, uvicorn's
httptools protocol), with the writes one event-loop step makes sent together, and zero-copy
bodies from files.

uvicorn writes a response's status line and headers, then its body, as two transport writes,
and uvloop sends each at once: two system calls, two TCP segments and two wake-ups of the
client for every small response (a 4 KiB GET, any PUT's 200). Here a small write is held
until the next write or the end of the loop step, whichever comes first, and then leaves with
it in one ``writev``. Nothing waits longer than the step that wrote it; large writes (bodies
streamed in blocks) are never held.

Zero-copy: on plain TCP (not TLS) the scope offers ASGI's ``http.response.zerocopysend``
extension. A message ``{"type": "http.response.zerocopysend", "file": FILE, "offset": N,
"count": N, "more_body": bool}`` sends those bytes of an open file with ``sendfile(2)``: the
kernel moves them from the page cache to the socket, never through Python's memory. It runs
on a thread of its own (a cold file would otherwise hold the event loop while the disk
reads), which waits for the socket to take more when it is full. The thread works on
duplicates of the socket's and the file's descriptors, so a connection closed or a file
closed meanwhile can never make it write elsewhere; the response's headers, still held,
leave from the same thread just before the body (``MSG_MORE``: one segment with its first
bytes). When uvloop still has earlier bytes of the connection buffered, the body is read and
written through the transport instead (the same bytes, copied).

Bytes that do not parse right after a whole request (a body longer than its Content-Length)
close the connection once that request is answered, rather than replacing its answer.
"""
from __future__ import annotations

import asyncio
import http
import logging
import os
import select
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

from plumbing.http_protocol import HttpLimits, HttpProtocol

from .errors import S3Error
from .request import new_request_id

HOLD_LIMIT = 16 * 1024  # writes up to this size may wait for the next one
ZEROCOPY = "http.response.zerocopysend"
COPY_BLOCK = 1024 * 1024  # the copying fallback reads this much at a time
SENDFILE_THREADS = 256    # responses sending at once (a thread waits on its slow client in poll)

log = logging.getLogger("strata.s3")
# the S3 error of each refusal of plumbing.http_protocol
REFUSAL_CODES = {"header_too_large": ("RequestHeaderSectionTooLarge", None), "timeout": ("RequestTimeout", None),
                 "busy": ("SlowDown", None),
                 "bad_request": ("BadRequest", "An error occurred when parsing the HTTP request.")}
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(SENDFILE_THREADS, thread_name_prefix="s3-sendfile")
    return _pool


class CoalescingTransport:
    """A transport whose small writes wait (within one loop step) to leave with the next."""

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            if len(data) > HOLD_LIMIT:
                self._transport.write(data)
            elif data:
                self._held = data
                self._loop.call_soon(self.flush)
            return
        self._held = None
        self._transport.writelines((held, data))

    def flush(self) -> None:
        """Send what is held (at the end of the loop step that wrote it, or before a close)."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def take_held(self) -> bytes:
        """What is held, taken out (the caller sends it itself)."""
        held, self._held = self._held, None
        return held or b""

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str):  # everything else is the transport's own
        return getattr(self._transport, name)


def _wait_writable(fd: int, stall: float) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    if not poller.poll(stall * 1000):
        raise TimeoutError(f"the client took no byte for {stall:g} s")


def send_file_blocking(sock_fd: int, head: bytes, file_fd: int, offset: int, count: int,
                       stall: float = HttpLimits.send_timeout) -> None:
    """Send ``head`` then bytes [offset, offset + count) of ``file_fd`` on the non-blocking
    socket ``sock_fd``, waiting whenever it is full, at most ``stall`` seconds for the
    client to take a byte (a worker thread; both descriptors are the caller's duplicates and
    are closed here)."""
    sock = socket.socket(fileno=sock_fd)
    try:
        view = memoryview(head)
        while view:
            try:
                view = view[sock.send(view, socket.MSG_MORE if count else 0):]
            except BlockingIOError:
                _wait_writable(sock_fd, stall)
        while count > 0:
            try:
                sent = os.sendfile(sock_fd, file_fd, offset, count)
            except BlockingIOError:
                _wait_writable(sock_fd, stall)
                continue
            if sent == 0:
                raise EOFError("the file is shorter than the response says")
            offset += sent
            count -= sent
    finally:
        sock.close()
        os.close(file_fd)


def _read_block(fd: int, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    if not data:
        raise EOFError("the file is shorter than the response says")
    return data


class ZeroCopySender:
    """The ``send`` of one request/response cycle, with ``http.response.zerocopysend``."""

    __slots__ = ("cycle", "send_asgi", "transport", "stall")

    def __init__(self, cycle, transport: CoalescingTransport, stall: float):
        self.cycle = cycle
        self.send_asgi = cycle.send
        self.transport = transport
        self.stall = stall  # seconds the client may take no byte

    async def __call__(self, message: dict) -> None:
        if message["type"] != ZEROCOPY:
            await self.send_asgi(message)
            return
        cycle = self.cycle
        if cycle.disconnected:
            return
        if not cycle.response_started or cycle.response_complete or cycle.chunked_encoding:
            raise RuntimeError(f"'{ZEROCOPY}' needs a started response with a Content-Length")
        file = message["file"]
        fd = file if isinstance(file, int) else file.fileno()
        offset = message.get("offset") or 0
        count = message.get("count")
        if count is None:
            count = os.fstat(fd).st_size - offset
        if count > cycle.expected_content_length:
            raise RuntimeError("Response content longer than Content-Length")
        cycle.expected_content_length -= count
        raw = self.transport._transport
        if count and cycle.scope["method"] != "HEAD":
            if raw.get_write_buffer_size() == 0 and not raw.is_closing():
                await self._sendfile(raw, fd, offset, count)
            else:
                await self._copy(fd, offset, count)
        if not message.get("more_body", False):
            await self.send_asgi({"type": "http.response.body", "body": b""})

    async def _sendfile(self, raw, fd: int, offset: int, count: int) -> None:
        sock_fd = raw.get_extra_info("socket").fileno()
        head = self.transport.take_held()
        dup_sock = os.dup(sock_fd)
        try:
            dup_file = os.dup(fd)
        except BaseException:
            os.close(dup_sock)
            raise
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(_executor(), send_file_blocking, dup_sock, head, dup_file, offset, count,
                                       self.stall)
        except asyncio.CancelledError:
            self._cut(raw, sock_fd)
            raise
        except EOFError as exc:
            log.error("%s %s: %s; run a scrub", self.cycle.scope["method"], self.cycle.scope["path"], exc)
            self._cut(raw, sock_fd)
        except OSError:  # the client went away or stalled
            self._cut(raw, sock_fd)

    def _cut(self, raw, sock_fd: int) -> None:
        """End the connection (the body cannot be finished): wake the sending thread, close."""
        self.cycle.disconnected = True
        if not raw.is_closing():
            try:
                sock = socket.socket(fileno=sock_fd)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                finally:
                    sock.detach()
            except OSError:
                pass
            raw.abort()

    async def _copy(self, fd: int, offset: int, count: int) -> None:
        loop = asyncio.get_running_loop()
        while count > 0 and not self.cycle.disconnected:
            data = await loop.run_in_executor(_executor(), _read_block, fd, offset, min(COPY_BLOCK, count))
            offset += len(data)
            count -= len(data)
            self.cycle.expected_content_length += len(data)  # counted again by the body send
            await self.send_asgi({"type": "http.response.body", "body": data, "more_body": True})


def _digested(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's headers carry a digest of its body (Content-MD5, a flexible
    checksum, or a SHA-256 of the payload that SigV4 signed), which a wrong body fails."""
    for name, value in headers:
        if name == b"content-md5" or name.startswith(b"x-amz-checksum-") or (
                name == b"x-amz-content-sha256" and len(value) == 64):
            return True
    return False


class GuardedReceive:
    """The ``receive`` of one request/response cycle, which, once ``spoiled`` before the end
    of the body was read, ends the body with ``http.disconnect`` after what has arrived (see
    :meth:`GatewayHttpProtocol.spoil`)."""

    __slots__ = ("receive", "spoiled", "done")

    def __init__(self, receive):
        self.receive = receive
        self.spoiled = False
        self.done = False  # the body's end was read (or it was cut short)

    async def __call__(self) -> dict:
        if self.spoiled and self.done:
            return {"type": "http.disconnect"}
        message = await self.receive()
        if message["type"] != "http.request":
            self.done = True
        elif self.spoiled:
            message["more_body"] = True
            self.done = True
        elif not message.get("more_body", False):
            self.done = True
        return message


class GatewayHttpProtocol(HttpProtocol):
    """Strata's HTTP protocol (uvicorn's httptools protocol with limits, stopping promptly
    over TLS) on a :class:`CoalescingTransport`, offering ``http.response.zerocopysend`` on
    plain TCP, and refusing in S3 XML."""

    def wrap_transport(self, transport: asyncio.Transport) -> CoalescingTransport:
        return CoalescingTransport(transport, self.loop)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.scheme == "http":
            self.scope["extensions"] = {ZEROCOPY: {}}

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            self.guard = cycle.receive = GuardedReceive(cycle.receive)
            if self.scheme == "http":
                cycle.send = ZeroCopySender(cycle, self.transport, self.limits.send_timeout)

    def spoil(self) -> bool:
        """The request in progress can no longer be trusted to have the body its
        Content-Length says (the client's framing is wrong, or it stopped sending): its
        application reads a disconnect after what it has, so nothing of the body is stored,
        and answers (``IncompleteBody``) before the connection closes. False: no request body
        is still to be read."""
        cycle, guard = self.cycle, getattr(self, "guard", None)
        if cycle is None or guard is None or cycle.response_complete or guard.done or guard.spoiled:
            return False
        guard.spoiled = True
        cycle.keep_alive = False
        cycle.message_event.set()
        self.disarm()
        return True

    def eof_received(self) -> bool:
        """The client closed its side: a body it had not finished ends the request with
        ``IncompleteBody`` (answered: the connection is still open the other way)."""
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not self.in_head and self.spoil():
            self.flow.pause_reading()
            return True
        return super().eof_received()

    def send_400_response(self, msg: str) -> None:
        """Bytes that do not parse as HTTP right after a whole request (a client whose body
        was longer than its Content-Length) end the connection after that request's answer,
        instead of a bare 400 in place of it. The answer is the request's own when a digest
        covers its body (the client reads ``BadDigest``, as S3 answers; s3-tests'
        test_object_create_bad_contentlength_mismatch_below), and ``IncompleteBody`` when
        nothing does and the application has not read the end of the body yet: the body may be
        only the first part of what the client meant, and is not stored. Anything else
        (garbage inside a request's head or body) is answered 400 ``BadRequest`` at once."""
        cycle = self.cycle
        if cycle is not None and not cycle.more_body and not cycle.response_complete:
            if not _digested(cycle.scope["headers"]):
                self.spoil()
            cycle.keep_alive = False
            self.flow.pause_reading()
            return
        super().send_400_response(msg)

    def refusal(self, kind: str, detail: str) -> bytes:
        """A refusal as S3 says it: an XML error (``RequestHeaderSectionTooLarge``,
        ``RequestTimeout``, ``SlowDown``, ``BadRequest``), never text."""
        code, message = REFUSAL_CODES[kind]
        err = S3Error(code, f"{message or S3Error(code).message} ({detail})")
        request_id = new_request_id()
        body = err.to_xml(request_id)
        return (f"HTTP/1.1 {err.status} {http.HTTPStatus(err.status).phrase}\r\n"
                f"content-type: application/xml\r\ncontent-length: {len(body)}\r\n"
                f"x-amz-request-id: {request_id}\r\nserver: Strata\r\nconnection: close\r\n\r\n"
                ).encode() + body
