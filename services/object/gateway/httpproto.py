"""The HTTP protocol the gateway serves with: uvicorn's httptools protocol, with the writes
one event-loop step makes sent together.

uvicorn writes a response's status line and headers, then its body, as two transport writes,
and uvloop sends each at once: two system calls, two TCP segments and two wake-ups of the
client for every small response (a 4 KiB GET, any PUT's 200). Here a small write is held
until the next write or the end of the loop step, whichever comes first, and then leaves with
it in one ``writev``. Nothing waits longer than the step that wrote it; large writes (bodies
streamed in blocks) are never held.
"""
from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HOLD_LIMIT = 16 * 1024  # writes up to this size may wait for the next one


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


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a :class:`CoalescingTransport`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))
