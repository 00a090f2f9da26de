"""Raw-HTTP helpers for cases boto3 cannot produce: aws-chunked bodies, short bodies, bad input.

Headers are signed by botocore's own SigV4 signer; only the aws-chunked framing and its
chunk signatures (which botocore does not produce over plain HTTP) are built here, following
the AWS "Signature Calculations for the Authorization Header: Transferring Payload in
Multiple Chunks" specification.
"""
from __future__ import annotations

import hashlib
import hmac
import socket
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

EMPTY = hashlib.sha256(b"").hexdigest()


def sign(method: str, url: str, access: str, secret: str, payload_hash: str = "UNSIGNED-PAYLOAD",
         headers: dict | None = None) -> dict:
    """Headers (with Authorization) for a request signed by botocore."""
    req = AWSRequest(method=method, url=url, headers=dict(headers or {}))
    req.headers["X-Amz-Content-SHA256"] = payload_hash
    SigV4Auth(Credentials(access, secret), "s3", "us-east-1").add_auth(req)
    return dict(req.headers.items())


def _key(secret: str, date: str) -> bytes:
    k = hmac.new(b"AWS4" + secret.encode(), date.encode(), hashlib.sha256).digest()
    for part in ("us-east-1", "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def aws_chunked(data: bytes, chunk: int, headers: dict, secret: str, signed: bool,
                trailer: tuple[str, str] | None = None) -> bytes:
    """Encode ``data`` as aws-chunked, chaining chunk signatures from the seed signature."""
    out = bytearray()
    amz_date = headers["X-Amz-Date"]
    scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
    key = _key(secret, amz_date[:8])
    prev = headers["Authorization"].rsplit("Signature=", 1)[1]
    pieces = [data[i:i + chunk] for i in range(0, len(data), chunk)] + [b""]
    for piece in pieces:
        if signed:
            sts = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, prev, EMPTY,
                             hashlib.sha256(piece).hexdigest()])
            prev = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
            out += f"{len(piece):x};chunk-signature={prev}\r\n".encode()
        else:
            out += f"{len(piece):x}\r\n".encode()
        if piece:
            out += piece + b"\r\n"
    if trailer:
        line = f"{trailer[0]}:{trailer[1]}"
        out += (line + "\r\n").encode()
        if signed:
            sts = "\n".join(["AWS4-HMAC-SHA256-TRAILER", amz_date, scope, prev,
                             hashlib.sha256((line + "\n").encode()).hexdigest()])
            sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
            out += f"x-amz-trailer-signature:{sig}\r\n".encode()
    out += b"\r\n"
    return bytes(out)


def request_head(method: str, url: str, headers: dict) -> bytes:
    """The request line and headers of one HTTP/1.1 request for ``url`` (path and query)."""
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    head = f"{method} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
    return (head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()


def read_response(fh, method: str = "GET") -> tuple[int, dict, bytes]:
    """Read one HTTP/1.1 response from the file object ``fh`` (a socket's ``makefile("rb")``):
    (status, headers with lower-case names, body); a HEAD response has no body. A header
    sent twice has its values joined with ", " (so a test sees the repeat)."""
    status = int(fh.readline().split(b" ", 2)[1])
    headers: dict = {}
    while (line := fh.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    size = 0 if method == "HEAD" else int(headers.get("content-length", "0"))
    return status, headers, fh.read(size)


def raw_request(url: str, method: str, headers: dict, body: bytes = b"", close_write: bool = False,
                timeout: float = 10) -> tuple[int, bytes]:
    """Send bytes as-is over a socket (body may disagree with Content-Length); (status, response)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(request_head(method, url, {"Connection": "close", **headers}) + body)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while True:
                got = sock.recv(65536)
                if not got:
                    break
                data += got
        except (ConnectionResetError, socket.timeout):
            pass
    if not data:
        return 0, b""
    return int(data.split(b" ", 2)[1]), data
