"""The S3 port's limits on what one client may hold (plumbing/http_protocol.py, the gateway's
config ``http``), measured with raw sockets: heads too long or with too many headers, heads
and bodies that stop coming, idle connections, connections per address, and bodies that end
early; each refusal is S3 XML. Limits are shortened here (seconds, not minutes) so that every
wait is bounded; the defaults are in the README."""
from __future__ import annotations

import os
import re
import socket
import threading
import time
import uuid

import pytest

from services.object.tests import s3raw
from services.object.tests.gatewayproc import ACCESS, SECRET, GatewayProcess
from tests import rawhttp

SHORT = {"header_timeout": 2, "body_timeout": 2, "send_timeout": 2, "keep_alive_timeout": 2,
         "max_connections_per_client": 8}


@pytest.fixture(scope="module")
def limited():
    with GatewayProcess.running(http=SHORT) as gw:
        yield gw


def s3_code(answer: bytes) -> str | None:
    found = re.search(rb"<Code>([^<]*)</Code>", rawhttp.body_of(answer))
    return found.group(1).decode() if found else None


def assert_s3_error(answer: bytes, status: int, code: str) -> None:
    assert rawhttp.status_of(answer) == status, answer[:400]
    assert rawhttp.header_of(answer, "content-type") == "application/xml", answer[:400]
    assert s3_code(answer) == code, answer[:400]


def new_bucket(gw) -> tuple[object, str]:
    s3 = gw.client()
    name = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return s3, name


def worker_pid(gw) -> int:
    return (gw.worker_pids() or [gw.proc.pid])[0]


def test_header_section_too_large_is_refused_without_holding_it(limited):
    """32 MiB of header on each of 8 connections at once: each is answered 400
    RequestHeaderSectionTooLarge once it passes 64 KiB, and the worker's peak memory grows by
    a few MiB, not by the 256 MiB sent (before: 59 -> 282 MiB)."""
    pid = worker_pid(limited)
    before = rawhttp.peak_rss_kib(pid)
    answers, sent = [None] * 8, [0] * 8

    def attack(i):
        with rawhttp.connect(limited.port, timeout=60) as sock:
            head = f"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big-{i}: ".encode()
            sent[i] = rawhttp.send_until_answered(sock, head, b"a" * 65536, 32 << 20)
            answers[i] = rawhttp.read_answer(sock, 60)

    threads = [threading.Thread(target=attack, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for answer in answers:
        assert answer is not None
        assert_s3_error(answer, 400, "RequestHeaderSectionTooLarge")
    grew = (rawhttp.peak_rss_kib(pid) - before) / 1024
    assert grew < 48, f"the worker's peak memory grew by {grew:.0f} MiB"
    s3, bucket = new_bucket(limited)
    s3.put_object(Bucket=bucket, Key="k", Body=b"still served")


def test_too_many_headers_are_refused(limited):
    many = "".join(f"X-H-{i}: v\r\n" for i in range(20000)).encode()
    few = "".join(f"X-H-{i}: v\r\n" for i in range(200)).encode()
    for headers in (many, few):
        with rawhttp.connect(limited.port) as sock:
            sock.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
            assert_s3_error(rawhttp.read_answer(sock), 400, "RequestHeaderSectionTooLarge")
    # 100 headers are a request like any other (here: anonymous, so AccessDenied)
    s3, bucket = new_bucket(limited)
    url = f"{limited.endpoint}/{bucket}/k"
    extra = {f"X-Extra-{i}": "v" for i in range(100)}
    status, answer = s3raw.raw_request(url, "GET", extra)
    assert status == 403 and b"AccessDenied" in answer


def test_framing_errors_are_s3_xml(limited):
    for garbage in (b"\x00\x01\x02 not http\r\n\r\n",
                    b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12x\r\n\r\n",
                    b"PUT /x HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"):
        with rawhttp.connect(limited.port) as sock:
            sock.sendall(garbage)
            assert_s3_error(rawhttp.read_answer(sock), 400, "BadRequest")


def test_slow_heads_and_idle_connections_are_cut_off(limited):
    # connected, nothing sent: closed without an answer
    with rawhttp.connect(limited.port) as sock:
        assert rawhttp.read_answer(sock, 30) == b""
    # a head sent a byte at a time (slowloris): 400 RequestTimeout once header_timeout passed
    with rawhttp.connect(limited.port) as sock:
        head = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if rawhttp.select_readable(sock, 0.5):
                break
        answer = rawhttp.read_answer(sock, 30)
        assert_s3_error(answer, 400, "RequestTimeout")
    # a kept-alive connection left idle after its answer: closed after keep_alive_timeout
    s3, bucket = new_bucket(limited)
    url = f"{limited.endpoint}/{bucket}/k"
    with rawhttp.connect(limited.port) as sock:
        sock.sendall(s3raw.request_head("GET", url, s3raw.sign("GET", url, ACCESS, SECRET)))
        with sock.makefile("rb") as fh:
            status, _, _ = s3raw.read_response(fh)
            assert status == 404
            sock.settimeout(30)
            assert fh.read(1) == b""
    # kept alive, then blank lines a second apart (no request ever begins): cut off too
    with rawhttp.connect(limited.port) as sock:
        sock.sendall(s3raw.request_head("GET", url, s3raw.sign("GET", url, ACCESS, SECRET)))
        with rawhttp.Trickle([sock], b"\r\n" * 60):
            assert rawhttp.closed_within(sock, 30)


def test_body_that_stops_half_way_is_request_timeout(limited):
    """A PUT whose body stops half-way (the connection stays open) is answered 400
    RequestTimeout after body_timeout, and the key keeps its previous version."""
    s3, bucket = new_bucket(limited)
    s3.put_object(Bucket=bucket, Key="k", Body=b"previous")
    url = f"{limited.endpoint}/{bucket}/k"
    for size in (1000, 4 << 20):  # a small PUT (read whole) and a large one (streamed to a file)
        headers = s3raw.sign("PUT", url, ACCESS, SECRET, "UNSIGNED-PAYLOAD", {"Content-Length": str(size)})
        with rawhttp.connect(limited.port) as sock:
            sock.sendall(s3raw.request_head("PUT", url, headers) + os.urandom(size // 2))
            assert_s3_error(rawhttp.read_answer(sock, 30), 400, "RequestTimeout")
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"previous"


def test_body_that_ends_early_is_incomplete_body(limited):
    """An unsigned PUT whose body ends before its Content-Length (the client closes its side,
    or closes the connection), or whose Content-Length is shorter than the body that follows
    with nothing to check it by: 400 IncompleteBody where the client can still read it, nothing
    stored, the previous version intact."""
    s3, bucket = new_bucket(limited)
    s3.put_object(Bucket=bucket, Key="k", Body=b"previous")
    url = f"{limited.endpoint}/{bucket}/k"
    for stated, body, how in ((1000, b"only-ten-b", "shut"), (10 << 20, os.urandom(1 << 20), "shut"),
                              (1000, b"only-ten-b", "close"), (5, b"0123456789", "keep")):
        headers = s3raw.sign("PUT", url, ACCESS, SECRET, "UNSIGNED-PAYLOAD", {"Content-Length": str(stated)})
        with rawhttp.connect(limited.port) as sock:
            sock.sendall(s3raw.request_head("PUT", url, headers) + body)
            if how == "shut":
                sock.shutdown(socket.SHUT_WR)
            if how != "close":
                assert_s3_error(rawhttp.read_answer(sock, 30), 400, "IncompleteBody")
        time.sleep(0.2)  # a close: the gateway sees it and drops the body
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"previous", (stated, how)


def test_connections_per_client_address(tmp_path):
    """A ninth connection from an address holding eight is answered 503 SlowDown; other
    addresses are served meanwhile, and the address again once it holds fewer."""
    with GatewayProcess.running(str(tmp_path), http={"max_connections_per_client": 8}) as gw:
        held = [rawhttp.connect(gw.port, "127.0.0.2") for _ in range(8)]
        try:
            s3, bucket = new_bucket(gw)  # from 127.0.0.1
            with rawhttp.connect(gw.port, "127.0.0.2") as ninth:
                assert_s3_error(rawhttp.read_answer(ninth), 503, "SlowDown")
            s3.put_object(Bucket=bucket, Key="k", Body=b"x")
            held.pop().close()
            time.sleep(0.2)
            url = f"{gw.endpoint}/{bucket}/k"
            with rawhttp.connect(gw.port, "127.0.0.2") as again:
                again.sendall(s3raw.request_head("GET", url, {"Connection": "close"}))
                assert rawhttp.status_of(rawhttp.read_answer(again)) == 403  # served (anonymous)
        finally:
            for sock in held:
                sock.close()


@pytest.mark.parametrize("encrypted", [False, True])
def test_reader_that_takes_nothing_is_cut_off(limited, encrypted):
    """A GET whose client takes no byte of the answer for send_timeout: the connection is cut
    (a plain object is sent with sendfile from a thread, an encrypted one through the
    event loop's transport)."""
    s3, bucket = new_bucket(limited)
    size = 32 << 20
    extra = {"ServerSideEncryption": "AES256"} if encrypted else {}
    s3.put_object(Bucket=bucket, Key="big", Body=os.urandom(size), **extra)
    url = f"{limited.endpoint}/{bucket}/big"
    with rawhttp.connect(limited.port) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        sock.sendall(s3raw.request_head("GET", url, s3raw.sign("GET", url, ACCESS, SECRET)))
        time.sleep(SHORT["send_timeout"] + 6)
        got = len(rawhttp.read_answer(sock, 60))
    assert got < size, "the whole object was sent to a client that read nothing for 8 s"


def test_service_continues_while_slow_clients_hold_connections(tmp_path):
    """200 idle connections, 30 heads sent a byte a second and 30 bodies that stopped, from
    other addresses, against a gateway of 2 workers: a boto3 client keeps being served while
    they run, and every one of them is closed by the gateway within a bounded time."""
    limits = {"header_timeout": 3, "body_timeout": 3, "keep_alive_timeout": 3, "send_timeout": 3,
              "max_connections_per_client": 40}
    with GatewayProcess.running(str(tmp_path), workers=2, http=limits) as gw:
        s3, bucket = new_bucket(gw)
        url = f"{gw.endpoint}/{bucket}/slow"
        idle = [rawhttp.connect(gw.port, f"127.0.0.{3 + i % 10}") for i in range(200)]
        loris = [rawhttp.connect(gw.port, "127.0.0.13") for _ in range(30)]
        stalled = [rawhttp.connect(gw.port, "127.0.0.14") for _ in range(30)]
        headers = s3raw.sign("PUT", url, ACCESS, SECRET, "UNSIGNED-PAYLOAD", {"Content-Length": str(1 << 20)})
        for sock in stalled:
            sock.sendall(s3raw.request_head("PUT", url, headers) + b"x" * 1024)
        head = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000
        with rawhttp.Trickle(loris, head):
            try:
                served = 0
                deadline = time.monotonic() + 12
                while time.monotonic() < deadline:
                    body = os.urandom(64 << 10)
                    s3.put_object(Bucket=bucket, Key=f"k{served}", Body=body)
                    assert s3.get_object(Bucket=bucket, Key=f"k{served}")["Body"].read() == body
                    served += 1
                assert served >= 1
                left = rawhttp.still_open(idle + loris + stalled, 60)
                assert not left, (f"{len(left)} of {len(idle + loris + stalled)} slow connections still "
                                  f"open (idle {sum(s in left for s in idle)}, heads "
                                  f"{sum(s in left for s in loris)}, bodies {sum(s in left for s in stalled)})")
            finally:
                for sock in idle + loris + stalled:
                    sock.close()
        assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="slow")


def test_limits_are_settings_with_checked_values():
    """The gateway's config ``http`` and the web server's STRATA_HTTP_* set the limits over
    the defaults; a value that is not a positive number, or an unknown name, is refused."""
    from plumbing.http_protocol import HttpLimits
    from services.object.gateway.config import ConfigError, http_settings, parse_config

    base = '{"data_root": "/tmp/x", "http": %s}'
    limits, keep_alive = http_settings(parse_config(base % '{"header_timeout": 5, "keep_alive_timeout": 7}'))
    assert (limits.header_timeout, keep_alive, limits.max_headers) == (5.0, 7.0, HttpLimits().max_headers)
    for bad in ('{"header_timeout": -1}', '{"max_headers": 1.5}', '{"keep_alive_timeout": "x"}',
                '{"made_up": 1}', '[1]'):
        with pytest.raises(ConfigError):
            parse_config(base % bad)
    assert HttpLimits.from_env({"STRATA_HTTP_MAX_HEADER_BYTES": "8192"}).max_header_bytes == 8192
    with pytest.raises(ValueError):
        HttpLimits.from_env({"STRATA_HTTP_BODY_TIMEOUT": "soon"})
