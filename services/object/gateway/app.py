"""The ASGI application: parse, route (path-style and virtual-host-style), authenticate,
dispatch to the handlers, and render every failure as S3 XML.
"""
from __future__ import annotations

import gc
import logging
from urllib.parse import parse_qsl, unquote

from plumbing.errors import is_disk_full

from . import access, acl_ops, admin, bucket_ops, bucket_tagging, cors, foreground, multipart, object_ops, \
    post_object, protection_ops, unconfigured
from .auth import authenticate
from .core import Gateway, OpenFiles, WorkerRole
from .errors import S3Error
from .httpproto import ZEROCOPY
from .request import Request, Response

log = logging.getLogger("strata.s3")
MAX_KEY_BYTES = 1024
ADMIN_PREFIX = "/_strata/admin/"

# Sub-resources S3 defines that this gateway does not implement (answered NotImplemented).
UNSUPPORTED = {"website", "logging", "notification", "replication", "requestPayment", "analytics", "inventory",
               "metrics", "intelligent-tiering", "accelerate", "torrent", "select"}


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
            self.gw = Gateway(self.config_path, role=self.role)
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
        cfg = gw.config
        if req.method == "OPTIONS" and req.bucket:  # CORS preflight: browsers do not sign it
            return cors.preflight(gw.buckets.get(req.bucket), req)
        req.auth = authenticate(req, cfg)
        for name in req.query:
            if name in UNSUPPORTED and not unconfigured.answers(req):
                raise S3Error("NotImplemented", f"The '{name}' sub-resource is not implemented by Strata")
        if not req.bucket:
            if req.method == "GET":
                if not req.auth.user:
                    raise S3Error("AccessDenied", "Anonymous users cannot list buckets")
                return await bucket_ops.list_buckets(gw, req)
            raise S3Error("MethodNotAllowed")
        if len(req.key.encode()) > MAX_KEY_BYTES:
            raise S3Error("KeyTooLongError", Size=str(len(req.key.encode())), MaxSizeAllowed=str(MAX_KEY_BYTES))
        if req.key:
            return await object_dispatch(gw, req)
        return await bucket_dispatch(gw, req)


def authorize(gw: Gateway, req: Request):
    """The request's bucket, if the signer may do this request there (see .access)."""
    return access.authorize(gw, req)


async def bucket_dispatch(gw: Gateway, req: Request) -> Response:
    """Bucket-level operations."""
    q, m = req.query, req.method
    if m == "PUT":
        if "versioning" in q:
            return await bucket_ops.put_versioning(gw, req, authorize(gw, req))
        if "lifecycle" in q:
            return await bucket_ops.put_lifecycle(gw, req, authorize(gw, req))
        if "policy" in q:
            return await bucket_ops.put_policy(gw, req, authorize(gw, req))
        if "encryption" in q:
            return await protection_ops.put_encryption(gw, req, authorize(gw, req))
        if "object-lock" in q:
            return await protection_ops.put_lock_configuration(gw, req, authorize(gw, req))
        if "cors" in q:
            return await cors.put_cors(gw, req, authorize(gw, req))
        if "tagging" in q:
            return await bucket_tagging.put_tagging(gw, req, authorize(gw, req))
        if "acl" in q:
            return await acl_ops.put_bucket_acl(gw, req, authorize(gw, req))
        if "ownershipControls" in q:
            return await acl_ops.put_ownership(gw, req, authorize(gw, req))
        if "publicAccessBlock" in q:
            return await acl_ops.put_public_access_block(gw, req, authorize(gw, req))
        return await bucket_ops.create_bucket(gw, req)
    if m == "DELETE":
        if "lifecycle" in q:
            await gw.run(authorize(gw, req).set_setting, "lifecycle", None)
            return Response(204)
        if "policy" in q:
            await gw.run(authorize(gw, req).set_setting, "policy", None)
            return Response(204)
        if "encryption" in q:
            return await protection_ops.delete_encryption(gw, authorize(gw, req))
        if "cors" in q:
            return await cors.delete_cors(gw, authorize(gw, req))
        if "tagging" in q:
            return await bucket_tagging.delete_tagging(gw, authorize(gw, req))
        if "ownershipControls" in q:
            return await acl_ops.delete_ownership(gw, authorize(gw, req))
        if "publicAccessBlock" in q:
            return await acl_ops.delete_public_access_block(gw, authorize(gw, req))
        authorize(gw, req)
        return await bucket_ops.delete_bucket(gw, req)
    if m == "POST" and "delete" in q:  # each key is checked, as its own DeleteObject
        return await object_ops.delete_objects(gw, req, gw.buckets.get(req.bucket))
    if m == "POST" and req.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        return await post_object.post_object(gw, req)  # a browser form: it carries its own signature
    bucket = authorize(gw, req)
    if m == "HEAD":
        return Response(200, {"x-amz-bucket-region": gw.config["region"]})
    if m == "GET":
        answer = unconfigured.bucket_answer(bucket, req)
        if answer is not None:
            return answer
        if "location" in q:
            return bucket_ops.location(gw, req)
        if "versioning" in q:
            return bucket_ops.get_versioning(bucket)
        if "versions" in q:
            return await bucket_ops.list_versions(gw, req, bucket)
        if "uploads" in q:
            return await multipart.list_uploads(gw, req, bucket)
        if "lifecycle" in q:
            return bucket_ops.get_lifecycle(bucket)
        if "policy" in q:
            return bucket_ops.get_policy(bucket)
        if "encryption" in q:
            return protection_ops.get_encryption(bucket)
        if "object-lock" in q:
            return protection_ops.get_lock_configuration(bucket)
        if "cors" in q:
            return cors.get_cors(bucket)
        if "tagging" in q:
            return bucket_tagging.get_tagging(bucket)
        if "acl" in q:
            return acl_ops.get_bucket_acl(bucket)
        if "ownershipControls" in q:
            return acl_ops.get_ownership(bucket)
        if "publicAccessBlock" in q:
            return acl_ops.get_public_access_block(bucket)
        if "policyStatus" in q:
            return acl_ops.get_policy_status(bucket)
        return await bucket_ops.list_objects(gw, req, bucket)
    raise S3Error("MethodNotAllowed")


async def object_dispatch(gw: Gateway, req: Request) -> Response:
    """Object-level operations."""
    bucket = authorize(gw, req)
    q, m = req.query, req.method
    if m in ("PUT", "GET"):
        foreground.mark(gw)  # client I/O: background work yields (see .foreground)
    if m == "PUT":
        if "uploadId" in q:
            if "x-amz-copy-source" in req.headers:
                return await multipart.upload_part_copy(gw, req, bucket)
            return await multipart.upload_part(gw, req, bucket)
        if "tagging" in q:
            return await object_ops.put_tagging(gw, req, bucket)
        if "retention" in q:
            return await protection_ops.put_retention(gw, req, bucket)
        if "legal-hold" in q:
            return await protection_ops.put_legal_hold(gw, req, bucket)
        if "acl" in q:
            return await acl_ops.put_object_acl(gw, req, bucket)
        if "x-amz-copy-source" in req.headers:
            return await object_ops.copy_object(gw, req, bucket)
        return await object_ops.put_object(gw, req, bucket)
    if m in ("GET", "HEAD"):
        unconfigured.object_answer(bucket, req)
        if "uploadId" in q and m == "GET":
            return await multipart.list_parts(gw, req, bucket)
        if "tagging" in q and m == "GET":
            return await object_ops.get_tagging(gw, req, bucket)
        if "attributes" in q and m == "GET":
            return await object_ops.get_attributes(gw, req, bucket)
        if "retention" in q and m == "GET":
            return await protection_ops.get_retention(gw, req, bucket)
        if "legal-hold" in q and m == "GET":
            return await protection_ops.get_legal_hold(gw, req, bucket)
        if "acl" in q and m == "GET":
            return await acl_ops.get_object_acl(gw, req, bucket)
        return await object_ops.get_object(gw, req, bucket)
    if m == "DELETE":
        if "uploadId" in q:
            return await multipart.abort(gw, req, bucket)
        if "tagging" in q:
            return await object_ops.delete_tagging(gw, req, bucket)
        return await object_ops.delete_object(gw, req, bucket)
    if m == "POST":
        if "uploads" in q:
            return await multipart.create(gw, req, bucket)
        if "uploadId" in q:
            return await multipart.complete(gw, req, bucket)
        if "restore" in q:
            return await object_ops.restore_object(gw, req, bucket)
    raise S3Error("MethodNotAllowed")


def create_app(config_path: str, role: WorkerRole | None = None) -> S3App:
    """The ASGI application for ``config_path`` (``role``: a worker of several, see .workers)."""
    return S3App(config_path, role)
