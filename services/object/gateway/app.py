"""The ASGI application: parse, route (path-style and virtual-host-style), authenticate,
dispatch to the handlers, and render every failure as S3 XML.
"""
from __future__ import annotations

import gc
import logging
from urllib.parse import parse_qsl, unquote

from plumbing.errors import is_disk_full

from . import access, admin, cors, foreground, object_ops, routes
from .admission import ADMISSION, REQUEST_CLASS
from .auth import authenticate
from .core import Gateway, OpenFiles, WorkerRole
from .stores import open_gateway, route_for
from .errors import S3Error
from .httpproto import ZEROCOPY
from .request import Request, Response

log = logging.getLogger("strata.s3")
MAX_KEY_BYTES = 1024
ADMIN_PREFIX = "/_strata/admin/"


async def _drain(receive, state: dict, limit: int = 256 << 20) -> None:
    """Read and drop the rest of a request body (up to ``limit`` bytes), so the client, still
    sending, reads the error instead of a reset connection."""
    while not state["done"] and limit > 0:
        message = await receive()
        if message["type"] != "http.request":
            return
        limit -= len(message.get("body", b""))


def _route(gw: Gateway, host: str, path: str) -> tuple[str, str]:
    """(bucket, key) from the Host header and the decoded path."""
    hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    for domain in gw.config.get("domains", ["localhost"]):
        if hostname.endswith("." + domain):
            return hostname[: -len(domain) - 1], path[1:]
    bucket, _, key = path[1:].partition("/")
    return bucket, key


class S3App:
    """ASGI callable serving S3 and the admin interface."""

    def __init__(self, config_path: str, role: WorkerRole | None = None):
        self.config_path = config_path
        self.role = role
        self.gw: Gateway | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if self.gw is None:  # servers without lifespan support
            await self._startup()
        await self._http(scope, receive, send)

    async def _startup(self) -> None:
        if self.gw is None:
            self.gw = open_gateway(self.config_path, role=self.role)
            await self.gw.start()
            # what start-up made (modules, routes, config) lives as long as the process: the
            # cyclic collector stops walking it, and runs a tenth as often (a request makes
            # hundreds of short-lived objects, few of them in cycles; perf showed ~3% of a
            # small GET in gc_collect_main)
            gc.freeze()
            gc.set_threshold(7000, 10, 10)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._startup()
                except Exception as exc:  # noqa: BLE001 - reported to the server, which exits
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.gw:
                    await self.gw.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope, receive, send) -> None:
        self.gw.watcher.refresh()  # once per request: a new key works at once
        raw_headers = scope["headers"]
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw_headers}
        if len(headers) != len(raw_headers):  # a repeated header: its values joined, in order
            headers = {}
            for name, value in raw_headers:
                n = name.decode("latin-1").lower()
                v = value.decode("latin-1")
                headers[n] = f"{headers[n]},{v}" if n in headers else v
        raw_path = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
        raw_path = raw_path.split("?", 1)[0]
        raw_query = scope.get("query_string", b"").decode("latin-1")
        query = dict(parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {}
        state = {"done": headers.get("content-length", "0") == "0" and "transfer-encoding" not in headers}

        async def tracked_receive():
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["done"] = True
            return message

        req = Request(scope["method"], raw_path, raw_query, headers, query, receive=tracked_receive,
                      client=(scope.get("client") or ("", 0))[0], scheme=scope.get("scheme", "http"),
                      zero_copy=ZEROCOPY in (scope.get("extensions") or ()))
        try:
            path = unquote(raw_path)
            if path.startswith(ADMIN_PREFIX) or path == ADMIN_PREFIX.rstrip("/"):
                resp = await admin.handle(self.gw, req, path[len(ADMIN_PREFIX):])
            else:
                req.bucket, req.key = _route(self.gw, headers.get("host", ""), path)
                resp = await self._s3(req)
        except S3Error as err:
            resp = self._error(req, err)
        except Exception as exc:  # noqa: BLE001 - the client gets InternalError, the log the traceback
            if is_disk_full(exc):
                log.warning("%s %s: the pool is full (%s)", req.method, raw_path, exc)
                resp = self._error(req, S3Error("InsufficientStorage"))
                await _drain(tracked_receive, state)
            else:
                log.exception("unhandled error in %s %s", req.method, raw_path)
                resp = self._error(req, S3Error("InternalError"))
        if "origin" in headers and req.bucket and self.gw is not None:
            cors.decorate(self.gw.buckets.buckets.get(req.bucket), req, resp)
        if not state["done"]:
            # the body was not read (an early error): do not let its bytes be parsed as a request
            resp.headers["connection"] = "close"
        await self._send(send, req, resp)

    def _error(self, req: Request, err: S3Error) -> Response:
        if not err.resource:
            err.resource = req.raw_path
        headers = dict(err.headers)
        if req.method == "HEAD" or err.status == 304:
            return Response(err.status, headers, b"")
        headers["content-type"] = "application/xml"
        return Response(err.status, headers, err.to_xml(req.request_id))

    async def _send(self, send, req: Request, resp: Response) -> None:
        body = resp.body
        streaming = not isinstance(body, (bytes, bytearray))
        headers = [(b"x-amz-request-id", req.request_id.encode()), (b"server", b"Strata")]
        if not streaming and "content-length" not in resp.headers:
            headers.append((b"content-length", b"%d" % len(body)))
        headers += [(name.lower().encode("latin-1"), str(value).encode("latin-1", "replace"))
                    for name, value in resp.headers.items()]
        if isinstance(body, OpenFiles):
            await self._send_files(send, resp.status, headers, body)
            return
        try:
            await send({"type": "http.response.start", "status": resp.status, "headers": headers})
            if not streaming:
                await send({"type": "http.response.body", "body": bytes(body) if req.method != "HEAD" else b""})
                return
            async for chunk in body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except OSError:
            pass  # client went away

    @staticmethod
    async def _send_files(send, status: int, headers: list, body: OpenFiles) -> None:
        """A body of opened files, each piece sent by the server with sendfile (see .httpproto)."""
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            for fh, offset, length in body.handles:
                await send({"type": ZEROCOPY, "file": fh, "offset": offset, "count": length, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except OSError:
            pass  # client went away
        finally:
            body.close()

    async def _s3(self, req: Request) -> Response:
        gw = self.gw
        if req.method == "OPTIONS" and req.bucket:  # CORS preflight: browsers do not sign it
            return cors.preflight(gw.buckets.get(req.bucket), req)
        req.auth = authenticate(req, gw.config)
        if req.bucket and len(req.key.encode()) > MAX_KEY_BYTES:
            raise S3Error("KeyTooLongError", Size=str(len(req.key.encode())), MaxSizeAllowed=str(MAX_KEY_BYTES))
        return await dispatch(gw, req)


async def dispatch(gw: Gateway, req: Request) -> Response:
    """Run the route of an authenticated request (see .routes): check who may (the route's IAM
    action, see .access) and the bucket owner the client expects, then call its handler."""
    level = routes.OBJECT if req.key else routes.BUCKET if req.bucket else routes.SERVICE
    route = routes.resolve(level, req.method, req.query, req.headers)
    if route is None:
        raise S3Error("MethodNotAllowed")
    route = route_for(gw, route)   # the store's own handler, or NotImplemented for what it lacks
    bucket = None
    if route.checks == routes.AUTHORIZE:
        bucket = access.authorize(gw, req, route.action_for(req.query))
        access.check_expected_owner(req, bucket)
    elif route.checks == routes.EACH_KEY:  # each key is then checked as its own DeleteObject
        bucket = gw.buckets.get(req.bucket)
        access.check_may_delete_some(req, bucket)
        access.check_expected_owner(req, bucket)
    if "x-amz-source-expected-bucket-owner" in req.headers and "x-amz-copy-source" in req.headers:
        source = object_ops.parse_copy_source(req.headers["x-amz-copy-source"])[0]
        access.check_expected_owner(req, gw.buckets.get(source), "x-amz-source-expected-bucket-owner")
    if level == routes.OBJECT and req.method in ("PUT", "GET"):
        foreground.mark(gw)  # client I/O: background work yields (see .foreground)
    if level != routes.OBJECT:
        return await route.handler(gw, req, bucket)
    ADMISSION.configure(gw.config.get("qos") or {})
    work_class = ADMISSION.class_of(req.bucket)
    await ADMISSION.enter(work_class)
    token = REQUEST_CLASS.set(work_class)
    try:
        return await route.handler(gw, req, bucket)
    finally:
        REQUEST_CLASS.reset(token)
        ADMISSION.leave(work_class)


def create_app(config_path: str, role: WorkerRole | None = None) -> S3App:
    """The ASGI application for ``config_path`` (``role``: a worker of several, see .workers)."""
    return S3App(config_path, role)
