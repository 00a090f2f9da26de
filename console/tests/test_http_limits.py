"""The API and console port's limits on what one client may hold (plumbing/http_protocol.py,
``STRATA_HTTP_*``), measured with raw sockets against the web server `strata up` runs
(uvicorn on Strata's protocol, console.asgi) on the test database: heads too long or with
too many headers (431), heads and bodies that stop coming (408), idle connections, and
connections per address (503), while a well-behaved client keeps being served."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest
import requests

from console.supervisor import web_argv
from tests import rawhttp
from tests.kit import free_port, wait_port

LIMITS = {"STRATA_HTTP_HEADER_TIMEOUT": "2", "STRATA_HTTP_BODY_TIMEOUT": "2", "STRATA_HTTP_SEND_TIMEOUT": "2",
          "STRATA_HTTP_MAX_CONNECTIONS_PER_CLIENT": "40"}


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    """The web server, with the suite's environment (database, data directory)."""
    port = free_port()
    log = tmp_path_factory.mktemp("web") / "web.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(web_argv("127.0.0.1", port), stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **LIMITS})
    try:
        wait_port(port, 60, proc=proc, what=f"the web server (see {log})")
        proc.port = port
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def served(web) -> int:
    """The status of the console's sign-in page (a page that needs no database)."""
    return requests.get(f"http://127.0.0.1:{web.port}/login/", timeout=30).status_code


def test_long_heads_and_many_headers_get_431_without_holding_them(web):
    before = rawhttp.peak_rss_kib(web.pid)
    answers = [None] * 8

    def attack(i):
        with rawhttp.connect(web.port, timeout=60) as sock:
            head = f"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big-{i}: ".encode()
            rawhttp.send_until_answered(sock, head, b"a" * 65536, 32 << 20)
            answers[i] = rawhttp.read_answer(sock, 60)

    threads = [threading.Thread(target=attack, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [rawhttp.status_of(a or b"") for a in answers] == [431] * 8
    grew = (rawhttp.peak_rss_kib(web.pid) - before) / 1024
    assert grew < 48, f"the web server's peak memory grew by {grew:.0f} MiB"
    for count in (20000, 200):
        headers = "".join(f"X-H-{i}: v\r\n" for i in range(count)).encode()
        with rawhttp.connect(web.port) as sock:
            sock.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
            assert rawhttp.status_of(rawhttp.read_answer(sock)) == 431
    assert served(web) == 200


def test_slow_heads_bodies_and_idle_connections_are_cut_off(web):
    with rawhttp.connect(web.port) as sock:  # nothing sent: closed, no answer
        assert rawhttp.read_answer(sock, 30) == b""
    with rawhttp.connect(web.port) as sock:  # a head a byte at a time
        for byte in b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            if rawhttp.select_readable(sock, 0.5):
                break
        assert rawhttp.status_of(rawhttp.read_answer(sock, 30)) == 408
    with rawhttp.connect(web.port) as sock:  # a body that stops half-way
        sock.sendall(b"POST /api/v1/auth/token/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n" + b"{" * 500)
        assert rawhttp.status_of(rawhttp.read_answer(sock, 30)) == 408
    with rawhttp.connect(web.port) as sock:  # kept alive after an answer, then idle
        sock.sendall(b"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert rawhttp.status_of(rawhttp.read_answer(sock, 60)) == 200  # closed after uvicorn's keep-alive


def test_connections_per_address_and_service_under_slow_clients(web):
    held = [rawhttp.connect(web.port, "127.0.0.2") for _ in range(40)]
    try:
        with rawhttp.connect(web.port, "127.0.0.2") as extra:
            assert rawhttp.status_of(rawhttp.read_answer(extra)) == 503
        assert served(web) == 200  # another address
    finally:
        for sock in held:
            sock.close()
    idle = [rawhttp.connect(web.port, f"127.0.0.{3 + i % 5}") for i in range(150)]
    loris = [rawhttp.connect(web.port, "127.0.0.9") for _ in range(20)]
    stalled = [rawhttp.connect(web.port, "127.0.0.10") for _ in range(10)]
    for sock in stalled:
        sock.sendall(b"POST /api/v1/auth/token/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\nx")
    head = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 1000
    with rawhttp.Trickle(loris, head):
        try:
            deadline, answered = time.monotonic() + 8, 0
            while time.monotonic() < deadline:
                assert served(web) == 200
                answered += 1
            assert answered >= 1
            left = rawhttp.still_open(idle + loris + stalled, 60)
            assert not left, f"{len(left)} of {len(idle + loris + stalled)} slow connections still open"
        finally:
            for sock in idle + loris + stalled:
                sock.close()
