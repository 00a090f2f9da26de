"""The floor of bench/s3.py: the least an S3 server in Python can do for s5cmd's small rows,
served by the same HTTP stack as Strata's gateway (uvicorn, uvloop, httptools and the
gateway's protocol, :mod:`services.object.gateway.httpproto`).

No signature check, no index, no durability (no fsync), no checksum: a bucket is a directory
(bench/s3.py puts them on /dev/shm: objects in RAM), an object a file named by its quoted key,
a listing ``os.listdir`` sorted. It answers what
``s5cmd mb``, ``cp DIR/* s3://b/p/`` and ``cp 's3://b/p/*' DIR/`` send (CreateBucket,
PutObject, ListObjectsV2, GetObject, HeadObject) and nothing else (no multipart upload, no
range), so it serves the 4 KiB rows only. What Strata spends per small request above this
server's CPU is what its S3 semantics cost; what this server spends is the HTTP stack's share.

bench/s3_servers.py starts it (``main([DIR, PORT, WORKERS])``; not a benchmark itself: ``make
bench`` skips it).
"""
from __future__ import annotations

import os
from urllib.parse import parse_qsl, quote, unquote
from xml.sax.saxutils import escape

LIST_MAX = 1000
STAMP = "2026-01-01T00:00:00.000Z"
HTTP_STAMP = b"Thu, 01 Jan 2026 00:00:00 GMT"
ETAG = b'"d41d8cd98f00b204e9800998ecf8427e"'


def _bucket_dir(bucket: str) -> str:
    return os.path.join(os.environ["STRATA_FLOOR_ROOT"], quote(bucket, safe=""))


def _object_path(bucket: str, key: str) -> str:
    return os.path.join(_bucket_dir(bucket), quote(key, safe=""))


async def _answer(send, status: int, headers: list, body: bytes = b"", head: bool = False) -> None:
    """The response, its body left out for a HEAD (which still says the body's length)."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", b"%d" % len(body)), *headers]})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def _body(receive) -> bytes:
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def _listing(bucket: str, query: dict) -> bytes:
    prefix = query.get("prefix", "")
    after = query.get("continuation-token") or query.get("start-after", "")
    keys = sorted(k for k in map(unquote, os.listdir(_bucket_dir(bucket))) if k.startswith(prefix) and k > after)
    page, truncated = keys[:LIST_MAX], len(keys) > LIST_MAX
    parts = [f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/'
             f'2006-03-01/"><Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>'
             f'<KeyCount>{len(page)}</KeyCount><MaxKeys>{LIST_MAX}</MaxKeys>'
             f'<IsTruncated>{"true" if truncated else "false"}</IsTruncated>']
    if truncated:
        parts.append(f"<NextContinuationToken>{escape(page[-1])}</NextContinuationToken>")
    for key in page:
        size = os.stat(_object_path(bucket, key)).st_size
        parts.append(f"<Contents><Key>{escape(key)}</Key><LastModified>{STAMP}</LastModified>"
                     f"<ETag>{ETAG.decode()}</ETag><Size>{size}</Size>"
                     f"<StorageClass>STANDARD</StorageClass></Contents>")
    parts.append("</ListBucketResult>")
    return "".join(parts).encode()


async def app(scope, receive, send) -> None:
    """ASGI: the five requests above; anything else is 501."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    bucket, _, key = unquote(scope["path"]).lstrip("/").partition("/")
    method = scope["method"]
    query = dict(parse_qsl(scope["query_string"].decode(), keep_blank_values=True))
    xml = [(b"content-type", b"application/xml")]
    if not key and method == "PUT":
        await _body(receive)
        os.makedirs(_bucket_dir(bucket), exist_ok=True)
        await _answer(send, 200, [])
    elif not key and method == "GET" and query.get("list-type") == "2":
        await _answer(send, 200, xml, _listing(bucket, query))
    elif key and method == "PUT" and not query:
        body = await _body(receive)
        fd = os.open(_object_path(bucket, key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body)  # a regular file takes the whole write (short only when full)
        finally:
            os.close(fd)
        await _answer(send, 200, [(b"etag", ETAG)])
    elif key and method in ("GET", "HEAD") and not query:
        try:
            fd = os.open(_object_path(bucket, key), os.O_RDONLY)
        except FileNotFoundError:
            await _answer(send, 404, xml, b"<Error><Code>NoSuchKey</Code></Error>", head=method == "HEAD")
            return
        try:
            data = os.read(fd, 1 << 20)   # the small rows only: every object is below 1 MiB
        finally:
            os.close(fd)
        await _answer(send, 200, [(b"etag", ETAG), (b"last-modified", HTTP_STAMP)], data, head=method == "HEAD")
    else:
        await _answer(send, 501, xml, b"<Error><Code>NotImplemented</Code></Error>")


def main(argv: list[str]) -> None:
    import uvicorn

    from services.object.gateway.httpproto import GatewayHttpProtocol

    root, port = argv[0], int(argv[1])
    workers = int(argv[2]) if len(argv) > 2 else 1
    os.environ["STRATA_FLOOR_ROOT"] = root   # the workers uvicorn spawns inherit it
    uvicorn.run("bench.s3_floor:app", host="127.0.0.1", port=port, workers=workers, loop="uvloop",
                http=GatewayHttpProtocol, lifespan="on", log_level="warning", access_log=False,
                server_header=False, timeout_keep_alive=30, backlog=2048,
                proxy_headers=False)  # as the gateway's: no X-Forwarded-* middleware per request
