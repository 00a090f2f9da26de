"""Request and response objects shared by the handlers."""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import AsyncIterator

from .body import Body
from .sigv4 import AuthContext


_ids = itertools.count()
_id_prefix = ""


def _new_process_ids() -> None:
    global _ids, _id_prefix
    _ids, _id_prefix = itertools.count(), os.urandom(3).hex().upper()


_new_process_ids()
os.register_at_fork(after_in_child=_new_process_ids)


def new_request_id() -> str:
    """A 16-character id unique to one request: a random per-process prefix and a counter
    (no system call, unlike a uuid4)."""
    return f"{_id_prefix}{next(_ids) & 0xFFFFFFFFFF:010X}"


@dataclass
class Request:
    """One parsed S3 request."""

    method: str
    raw_path: str
    raw_query: str
    headers: dict[str, str]
    query: dict[str, str]
    bucket: str = ""
    key: str = ""
    receive: object = None
    auth: AuthContext | None = None
    client: str = ""          # the peer's address (aws:SourceIp)
    scheme: str = "http"      # "https" behind TLS (aws:SecureTransport)
    zero_copy: bool = False   # the server sends open files itself (sendfile, see .httpproto)
    request_id: str = field(default_factory=new_request_id)

    def body(self) -> Body:
        """The request body reader."""
        return Body(self.receive, self.headers, self.auth)


@dataclass
class Response:
    """Status, headers and a body (bytes or an async iterator of bytes)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | AsyncIterator[bytes] = b""


def xml_response(body: bytes, status: int = 200, headers: dict | None = None) -> Response:
    """An XML response."""
    h = {"content-type": "application/xml"}
    h.update(headers or {})
    return Response(status, h, body)
