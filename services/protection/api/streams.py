"""A long byte stream (a `btrfs send` behind a generator) as an HTTP response body that is
not buffered whole, under WSGI (the test server) and ASGI (uvicorn) alike."""
import asyncio
from concurrent.futures import ThreadPoolExecutor

from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import StreamingHttpResponse
from rest_framework.permissions import BasePermission

from plane.roles import can_change


class OperatorOnly(BasePermission):
    """A GET that hands out a file system's or volume's whole content (a send stream) and
    loads the disks: operators and admins only, like the writes."""

    message = "Reading a replication stream needs the operator or admin role."

    def has_permission(self, request, view):
        return can_change(request.user)


def _finish(chunks) -> None:
    chunks.close()  # stops the producer (kills `btrfs send`) if it had not ended
    connections.close_all()  # the budget reads the database in this thread


async def _async_chunks(chunks):
    """Django consumes a *sync* iterator whole before sending it under ASGI; hand it an
    async one that pulls each chunk in a thread of its own (the producer is not
    thread-safe, so one thread does every call on it, its close last)."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(1, thread_name_prefix="stream")
    try:
        while True:
            chunk = await loop.run_in_executor(pool, next, chunks, None)
            if chunk is None:
                return
            yield chunk
    finally:
        pool.submit(_finish, chunks)  # after a next() still running (client went away)
        pool.shutdown(wait=False)


def stream_response(request, chunks) -> StreamingHttpResponse:
    """``chunks`` (a generator of bytes) as an ``application/octet-stream`` body."""
    raw = getattr(request, "_request", request)
    body = _async_chunks(chunks) if isinstance(raw, ASGIRequest) else chunks
    response = StreamingHttpResponse(body, content_type="application/octet-stream")
    response["X-Accel-Buffering"] = "no"
    return response
