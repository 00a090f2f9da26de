"""The HTTP protocol Strata's web servers (the console and API, the S3 gateway) run on:
uvicorn's httptools protocol, which stops promptly while clients keep idle HTTPS connections.

At a stop uvicorn closes every idle connection and waits until each is gone. Closing a TLS
connection properly sends close_notify and waits for the client's, and a client that keeps
the connection idle in its pool (boto3, requests, the CLI) never reads it, so every such
connection would hold the stop for the TLS shutdown timeout (30 s in uvloop), past the
supervisor's patience. Here an idle HTTPS connection is cut at once instead; its client
opens a new connection on its next request. A request in progress still gets its answer.

uvicorn takes it by name: ``--http plumbing.http_protocol:HttpProtocol``.
"""
from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class HttpProtocol(HttpToolsProtocol):
    def shutdown(self) -> None:
        cycle = self.cycle
        if self.scheme == "https" and (cycle is None or cycle.response_complete):
            self.transport.abort()
            return
        super().shutdown()
