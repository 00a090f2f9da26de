"""The HTTP protocol Strata's web servers (the console and API, the S3 gateway) run on:
uvicorn's httptools protocol, with limits on what one client may hold, and a prompt stop
while clients keep idle HTTPS connections.

Limits (:class:`HttpLimits`; the defaults suit both ports, the environment or the gateway's
config changes them):

- the request head (request line and headers) may be ``max_header_bytes`` long and hold
  ``max_headers`` headers; a longer one is refused (431 here, S3's 400
  ``RequestHeaderSectionTooLarge`` on the S3 port) as soon as it passes the limit, so a
  connection never holds more than the limit and one read (httptools itself has no limit,
  and joins a long header value by concatenation, which is quadratic);
- a request's head must arrive whole within ``header_timeout`` seconds of its first byte (of
  the connection, for its first request): a client that sends a head a byte at a time
  (slowloris), or connects and sends nothing, is cut off;
- a request body must make progress: ``body_timeout`` seconds without a byte of it (while the
  server is ready to read) end the request with 408 (S3's 400 ``RequestTimeout``), and the
  application reads a disconnect, so nothing of the body is kept;
- a response the client takes no byte of for ``send_timeout`` seconds ends the connection;
- a connection idle between requests is closed after uvicorn's ``timeout_keep_alive``;
- one client address may hold ``max_connections_per_client`` connections at once in one
  server process (a gateway of N workers: N times that); further ones are answered 503 (S3's
  ``SlowDown``) and closed.

Refusals are rendered by :meth:`HttpProtocol.refusal`, which the S3 gateway overrides to
answer S3 XML.

At a stop uvicorn closes every idle connection and waits until each is gone. Closing a TLS
connection properly sends close_notify and waits for the client's, and a client that keeps
the connection idle in its pool (boto3, requests, the CLI) never reads it, so every such
connection would hold the stop for the TLS shutdown timeout (30 s in uvloop), past the
supervisor's patience. Here an idle HTTPS connection is cut at once instead; its client
opens a new connection on its next request. A request in progress still gets its answer.

uvicorn takes it by name: ``--http plumbing.http_protocol:HttpProtocol`` (limits from the
environment, see :meth:`HttpLimits.from_env`).
"""
from __future__ import annotations

import asyncio
import dataclasses
import http
import os
from dataclasses import dataclass

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import is_ssl

ENV_PREFIX = "STRATA_HTTP_"
LINGER_SECONDS = 2.0  # after a refusal, what the client still sends is read (and dropped) this long


@dataclass(frozen=True)
class HttpLimits:
    """What one client may hold of a server; see the module's docstring."""

    max_header_bytes: int = 64 * 1024         # request line and headers
    max_headers: int = 128
    header_timeout: float = 30.0              # seconds from a request's first byte to its last header
    body_timeout: float = 60.0                # seconds without a byte of a request body
    send_timeout: float = 120.0               # seconds a response waits for the client to take a byte
    max_connections_per_client: int = 512     # per address, per server process

    @classmethod
    def from_mapping(cls, values: dict) -> "HttpLimits":
        """Limits with ``values`` (field name -> positive number) over the defaults; a
        ValueError names what is wrong."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        out = {}
        for name, value in values.items():
            field = fields.get(name)
            if field is None:
                raise ValueError(f"unknown HTTP limit {name!r} (known: {', '.join(fields)})")
            kind = int if field.type == "int" else float
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 \
                    or (kind is int and value != int(value)):
                raise ValueError(f"HTTP limit {name!r} must be a positive {kind.__name__}, not {value!r}")
            out[name] = kind(value)
        return cls(**out)

    @classmethod
    def from_env(cls, environ=None) -> "HttpLimits":
        """Limits from ``STRATA_HTTP_<FIELD>`` variables (``STRATA_HTTP_MAX_HEADER_BYTES=65536``,
        ``STRATA_HTTP_BODY_TIMEOUT=60``...) over the defaults."""
        environ = os.environ if environ is None else environ
        values = {}
        for field in dataclasses.fields(cls):
            text = environ.get(ENV_PREFIX + field.name.upper())
            if text:
                try:
                    values[field.name] = float(text)
                except ValueError:
                    raise ValueError(f"{ENV_PREFIX}{field.name.upper()}={text!r} is not a number") from None
        return cls.from_mapping(values)


# what a refusal is, and how the API port says it: status, reason
REFUSALS = {
    "header_too_large": 431,
    "timeout": 408,
    "busy": 503,
    "bad_request": 400,
}


class _Refused(Exception):
    """Raised inside the parser's callbacks to stop parsing a request that is refused."""


def address(info) -> tuple[str, int] | None:
    """(host, port) of a socket address as the transport gives it (None: not an IP socket)."""
    if isinstance(info, (tuple, list)) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with :class:`HttpLimits` (``limits``) and a prompt stop
    over TLS."""

    limits = HttpLimits.from_env()

    @classmethod
    def with_limits(cls, limits: HttpLimits) -> type:
        """This protocol class with other limits (uvicorn takes a class)."""
        return type(cls.__name__, (cls,), {"limits": limits})

    # connection

    def wrap_transport(self, transport: asyncio.Transport) -> asyncio.Transport:
        """The transport responses are written to (a subclass may wrap it)."""
        return transport

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """uvicorn's, with both addresses from what uvloop read at accept (uvicorn asks a new
        socket object for them again, five more system calls a connection), then the
        per-address limit and the deadline of the first request's head."""
        self.connections.add(self)
        self.transport = self.wrap_transport(transport)
        self.flow = FlowControl(transport)
        self.server = address(transport.get_extra_info("sockname"))
        self.client = address(transport.get_extra_info("peername"))
        self.scheme = "https" if is_ssl(transport) else "http"
        self.received = 0         # bytes of this connection so far
        self.head_bytes = 0       # bytes received while the current request's head was incomplete
        self.in_head = True       # waiting for (the rest of) a request head
        self.head_begun = False   # a byte of it has been parsed
        self.timer: asyncio.TimerHandle | None = None
        self.timer_mark = 0       # ``received`` when the timer was armed
        self.refused: tuple[str, str] | None = None
        self.refusing = False
        self.send_timer: asyncio.TimerHandle | None = None
        self.send_mark = 0
        self.counted: str | None = None
        host = self.client[0] if self.client else None
        if host is not None:
            counts = _per_client(self.server_state)
            held = counts.get(host, 0)
            if held >= self.limits.max_connections_per_client:
                self.refuse("busy", f"{host} holds {held} connections, the most one address may")
                return
            counts[host] = held + 1
            self.counted = host
        self.arm(self.limits.header_timeout, self.head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self.send_timer is not None:
            self.send_timer.cancel()
            self.send_timer = None
        if self.counted is not None:
            counts = _per_client(self.server_state)
            left = counts.get(self.counted, 1) - 1
            if left > 0:
                counts[self.counted] = left
            else:
                counts.pop(self.counted, None)
            self.counted = None
        super().connection_lost(exc)

    # timers: one a connection (the head's deadline, or the body's or the response's progress)

    def arm(self, seconds: float, handler) -> None:
        self.disarm()
        self.timer_mark = self.received
        self.timer = self.loop.call_later(seconds, handler)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def head_timed_out(self) -> None:
        self.timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # the head of a pipelined request waits while the one before it is answered
            self.arm(self.limits.header_timeout, self.head_timed_out)
            return
        if self.head_bytes == 0 and not self.head_begun:
            self.transport.close()  # it asked nothing: nothing to answer
        else:
            self.refuse("timeout", f"the request head did not arrive within {self.limits.header_timeout:g} s")

    def body_check(self) -> None:
        """The body's progress timer: a client that sent nothing of its body for
        ``body_timeout`` seconds, while the server was ready to read, is answered 408."""
        self.timer = None
        cycle = self.cycle
        if self.transport.is_closing() or cycle is None or not cycle.more_body or self.in_head:
            return
        if self.received != self.timer_mark or self.flow.read_paused or cycle.waiting_for_100_continue:
            self.arm(self.limits.body_timeout, self.body_check)  # progress, or waiting for us
            return
        message = f"no byte of the request body arrived for {self.limits.body_timeout:g} s"
        cycle.disconnected = True  # the application reads a disconnect: nothing of it is kept
        cycle.message_event.set()
        if cycle.response_started:
            self.transport.close()
        else:
            self.refuse("timeout", message)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.send_timer is not None:
            self.send_timer.cancel()
        self.send_mark = self.transport.get_write_buffer_size()
        self.send_timer = self.loop.call_later(self.limits.send_timeout, self.send_check)

    def resume_writing(self) -> None:
        if self.send_timer is not None:
            self.send_timer.cancel()
            self.send_timer = None
        super().resume_writing()

    def send_check(self) -> None:
        """The response's progress timer (armed while writes wait for the client): a client
        that took no byte for ``send_timeout`` seconds is cut off."""
        self.send_timer = None
        if self.transport.is_closing() or not self.flow.write_paused:
            return
        size = self.transport.get_write_buffer_size()
        if size < self.send_mark:
            self.send_mark = size
            self.send_timer = self.loop.call_later(self.limits.send_timeout, self.send_check)
            return
        if self.cycle is not None:
            self.cycle.disconnected = True
        self.transport.abort()

    # parsing

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self.refusing:
            return  # dropped: the connection ends once the client has read the refusal
        self.received += len(data)
        if self.in_head:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self.refused is not None:
                self.refuse(*self.refused)
            else:
                self.send_400_response("Invalid HTTP request received.")
            return
        # timers are armed only for what this read left unfinished (a request that arrives
        # whole in one read, the rule, makes none)
        if self.timer is None:
            if self.in_head and (self.head_begun or self.head_bytes):  # on a kept-alive connection
                self.arm(self.limits.header_timeout, self.head_timed_out)
            elif not self.in_head and self.cycle is not None and self.cycle.more_body:
                self.arm(self.limits.body_timeout, self.body_check)
        if self.in_head and self.head_bytes > self.limits.max_header_bytes:
            self.refuse("header_too_large",
                        f"the request head is longer than {self.limits.max_header_bytes} bytes")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.header_count = 0
        self.head_begun = True

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > self.limits.max_headers:
            self.refused = ("header_too_large", f"the request has more than {self.limits.max_headers} headers")
            raise _Refused(self.refused[1])
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = self.head_begun = False
        self.head_bytes = 0
        self.disarm()  # the body's timer, if it does not arrive in this read, is armed after it
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.in_head = True
        self.disarm()  # the next request's head is timed from its first byte

    # refusals

    def refusal(self, kind: str, detail: str) -> bytes:
        """The whole response refusing a request (``kind``: a key of :data:`REFUSALS`)."""
        status = REFUSALS[kind]
        body = f"{http.HTTPStatus(status).phrase}: {detail}\n".encode()
        return (f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
                "content-type: text/plain; charset=utf-8\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body

    def refuse(self, kind: str, detail: str) -> None:
        """Answer ``kind`` and end the connection (the request is not handled). The answer
        is followed by the end of our side of the stream; what the client still sends is
        read and dropped for ``LINGER_SECONDS`` (a close with unread bytes would reset the
        connection, and the client might lose the answer), then the connection closes."""
        self.disarm()
        if self.transport.is_closing() or self.refusing:
            return
        self.refusing = True
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:  # it has its answer already under way: just end it
                self.transport.close()
                return
        self.transport.write(self.refusal(kind, detail))
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.flow.resume_reading()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self.refuse("bad_request", msg)

    def eof_received(self) -> bool | None:
        """The client closed its side: a request it sent whole still gets its answer, then the
        connection closes (uvicorn would close at once); anything else closes now."""
        cycle = self.cycle
        if not self.refusing and cycle is not None and not cycle.response_complete and not cycle.more_body:
            cycle.keep_alive = False
            return True
        return None

    def shutdown(self) -> None:
        cycle = self.cycle
        if self.scheme == "https" and (cycle is None or cycle.response_complete):
            self.transport.abort()
            return
        super().shutdown()


def _per_client(server_state) -> dict[str, int]:
    """Connections held per client address in this server (kept on uvicorn's state object)."""
    counts = getattr(server_state, "strata_per_client", None)
    if counts is None:
        counts = server_state.strata_per_client = {}
    return counts
