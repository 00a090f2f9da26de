"""Several gateway worker processes on one port (``--workers N``): whatever worker a request
lands on, it sees every acknowledged write and every settings change made through the
others; a conditional write races atomically across them; a worker killed with -9 loses no
acknowledged PUT and is replaced while the others keep serving.

To send a request through one chosen worker, the test opens a keep-alive connection while
the other workers are stopped (SIGSTOP: they cannot accept), checks which worker answers on
it (the admin health route names its pid), and lets the others go on (SIGCONT).
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import signal
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.object.tests.gatewayproc import ACCESS, ADMIN_TOKEN, SECRET, USER_ACCESS, USER_SECRET, \
    GatewayProcess
from services.object.tests.s3raw import sign
from tests.kit import wait_for


def _wait_workers(gw, count: int, timeout: float = 30, without: int | None = None) -> list[int]:
    """The gateway's worker PIDs, once there are ``count`` of them (not ``without``) and each
    answers."""
    def answering():
        pids = [p for p in gw.worker_pids() if p != without]
        if len(pids) != count:
            return None
        for pid in pids:
            Conn.to(gw, pid).close()
        return pids

    return wait_for(answering, timeout, f"{count} answering workers", interval=0.2,
                    ignore=(AssertionError, OSError))


class Conn:
    """One keep-alive connection, so one worker; S3 requests signed as the admin user. A
    connection the worker closed while idle (its keep-alive timeout) is opened again to the
    same worker."""

    def __init__(self, gw):
        self.gw = gw
        self.worker: int | None = None
        self.http = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)

    @classmethod
    def to(cls, gw, pid: int) -> "Conn":
        """A connection served by worker ``pid``."""
        conn = cls(gw)
        conn._pin(pid)
        return conn

    def _pin(self, pid: int) -> None:
        others = [p for p in self.gw.worker_pids() if p != pid]
        for other in others:
            os.kill(other, signal.SIGSTOP)
        try:
            self.http.close()
            self.http.connect()
            assert self.pid() == pid
            self.worker = pid
        finally:
            for other in others:
                os.kill(other, signal.SIGCONT)

    def request(self, method: str, path: str, body: bytes = b"", headers: dict | None = None,
                signed: bool = True) -> tuple[int, dict, bytes]:
        headers = dict(headers or {})
        if signed:
            headers = sign(method, self.gw.endpoint + path, ACCESS, SECRET, hashlib.sha256(body).hexdigest(),
                           headers)
        try:
            self.http.request(method, path, body=body, headers=headers)
            resp = self.http.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if self.worker is None:
                raise
            self._pin(self.worker)  # closed while idle: nothing was served on it
            self.http.request(method, path, body=body, headers=headers)
            resp = self.http.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()

    def pid(self) -> int:
        status, _, data = self.request("GET", "/_strata/admin/health", signed=False,
                                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert status == 200
        return json.loads(data)["pid"]

    def close(self) -> None:
        self.http.close()


def _body(key: str, size: int, salt: str = "") -> bytes:
    seed = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


@pytest.fixture(scope="module")
def multi():
    """A gateway with three workers, and one connection pinned to each."""
    with GatewayProcess.running(workers=3) as gw:
        pids = _wait_workers(gw, 3)
        conns = [Conn.to(gw, pid) for pid in pids]
        yield gw, conns
        for conn in conns:
            conn.close()


def _new_bucket(conn) -> str:
    name = f"w-{uuid.uuid4().hex[:12]}"
    assert conn.request("PUT", f"/{name}")[0] == 200
    return name


def test_puts_through_many_connections_are_seen_by_every_worker(multi):
    gw, conns = multi
    s3 = gw.client(max_pool_connections=64)
    bucket = _new_bucket(conns[0])
    seg_dir = os.path.join(gw.data_root, "segments")
    appended_before = {n for n in os.listdir(seg_dir) if os.path.getsize(os.path.join(seg_dir, n))}
    sizes = {f"obj/{i:04d}": (4096 + i if i % 4 else 300_000 + i) for i in range(240)}

    def put(key):
        s3.put_object(Bucket=bucket, Key=key, Body=_body(key, sizes[key]))

    with ThreadPoolExecutor(max_workers=48) as pool:
        list(pool.map(put, sizes))
    # each worker appends small objects to segments of its own: more than one did
    appended = {n for n in os.listdir(seg_dir) if os.path.getsize(os.path.join(seg_dir, n))} - appended_before
    assert len(appended) >= 2, appended
    for conn in conns:  # every worker lists and reads every acknowledged object at once
        status, _, xml = conn.request("GET", f"/{bucket}?list-type=2&max-keys=1000")
        assert status == 200 and xml.count(b"<Key>") == len(sizes)
        for key in list(sizes)[conns.index(conn)::7]:
            status, headers, data = conn.request("GET", f"/{bucket}/{key}")
            assert status == 200 and hashlib.sha256(data).digest() == hashlib.sha256(_body(key, sizes[key])).digest()
            status, headers, _ = conn.request("HEAD", f"/{bucket}/{key}")
            assert status == 200 and int(headers["content-length"]) == sizes[key]
        status, _, data = conn.request("GET", f"/_strata/admin/buckets/{bucket}", signed=False,
                                       headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        usage = json.loads(data)
        assert (usage["objects"], usage["bytes"]) == (len(sizes), sum(sizes.values()))


def test_multipart_parts_through_two_workers_completed_through_a_third(multi):
    gw, (a, b, c) = multi
    bucket = _new_bucket(a)
    key = "big/model.pt"
    status, _, xml = a.request("POST", f"/{bucket}/{key}?uploads")
    assert status == 200
    upload = xml.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    parts = [_body(key, 5 * 1024 * 1024, "p1"), _body(key, 1_000_000, "p2")]
    etags = []
    for n, (conn, data) in enumerate(zip((a, b), parts), start=1):
        status, headers, _ = conn.request("PUT", f"/{bucket}/{key}?partNumber={n}&uploadId={upload}", data)
        assert status == 200
        etags.append(headers["etag"])
    status, _, xml = c.request("GET", f"/{bucket}/{key}?uploadId={upload}")
    assert status == 200 and xml.count(b"<PartNumber>") == 2
    done = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in enumerate(etags, 1))
    status, _, xml = c.request("POST", f"/{bucket}/{key}?uploadId={upload}",
                               f"<CompleteMultipartUpload>{done}</CompleteMultipartUpload>".encode())
    assert status == 200, xml
    for conn in (a, b, c):
        status, _, data = conn.request("GET", f"/{bucket}/{key}")
        assert status == 200 and hashlib.sha256(data).digest() == hashlib.sha256(b"".join(parts)).digest()


def test_if_none_match_race_across_workers_has_exactly_one_winner(multi):
    _, (a, b, _c) = multi
    bucket = _new_bucket(a)
    for round_no in range(15):
        key = f"lease-{round_no}"
        start = threading.Barrier(2)
        results = {}

        def put(conn, name):
            start.wait()
            results[name] = conn.request("PUT", f"/{bucket}/{key}", name.encode() * 100,
                                         {"If-None-Match": "*"})[0]

        threads = [threading.Thread(target=put, args=(conn, name)) for conn, name in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results.values()) == [200, 412], results
        winner = next(name for name, status in results.items() if status == 200)
        for conn in (a, b):
            assert conn.request("GET", f"/{bucket}/{key}")[2] == winner.encode() * 100


def test_bucket_settings_changed_through_one_worker_are_seen_by_the_others(multi):
    _, (a, b, c) = multi
    bucket = _new_bucket(a)
    assert b.request("HEAD", f"/{bucket}")[0] == 200 and c.request("HEAD", f"/{bucket}")[0] == 200
    # versioning enabled through b: c keeps every version, a lists them
    body = (b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<Status>Enabled</Status></VersioningConfiguration>")
    assert b.request("PUT", f"/{bucket}?versioning", body)[0] == 200
    for n in range(2):
        assert c.request("PUT", f"/{bucket}/doc", b"v%d" % n)[0] == 200
    assert a.request("GET", f"/{bucket}?versions")[2].count(b"<Version>") == 2
    # a public-read policy through c: anonymous GETs through a and b work; deleted through a: refused
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                                                      "Resource": f"arn:aws:s3:::{bucket}/*"}]}
    assert c.request("PUT", f"/{bucket}?policy", json.dumps(policy).encode())[0] == 204
    for conn in (a, b):
        assert conn.request("GET", f"/{bucket}/doc", signed=False)[0] == 200
    assert a.request("DELETE", f"/{bucket}?policy")[0] == 204
    for conn in (b, c):
        assert conn.request("GET", f"/{bucket}/doc", signed=False)[0] == 403
    # tags through a (while b changes another setting): both stay, as every worker sees
    tagging = b"<Tagging><TagSet><Tag><Key>team</Key><Value>ml</Value></Tag></TagSet></Tagging>"
    assert a.request("PUT", f"/{bucket}?tagging", tagging)[0] == 204
    cors = (b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
            b"</CORSRule></CORSConfiguration>")
    assert b.request("PUT", f"/{bucket}?cors", cors)[0] == 200
    for conn in (a, b, c):
        assert b"<Value>ml</Value>" in conn.request("GET", f"/{bucket}?tagging")[2]
        assert b"<AllowedOrigin>*</AllowedOrigin>" in conn.request("GET", f"/{bucket}?cors")[2]
    # a quota set through the admin interface of a holds for PUTs through c
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    assert a.request("PUT", f"/_strata/admin/buckets/{bucket}/quota", json.dumps({"objects": 2}).encode(),
                     admin, signed=False)[0] == 200
    status, _, xml = c.request("PUT", f"/{bucket}/third", b"x")
    assert status == 403 and b"QuotaExceeded" in xml
    # emptied and deleted through c: gone for a and b; made again through b
    for version in c.request("GET", f"/{bucket}?versions")[2].split(b"<VersionId>")[1:]:
        vid = version.split(b"</VersionId>")[0].decode()
        assert c.request("DELETE", f"/{bucket}/doc?versionId={vid}")[0] == 204
    assert c.request("DELETE", f"/{bucket}")[0] == 204
    assert a.request("HEAD", f"/{bucket}")[0] == 404 and b.request("GET", f"/{bucket}/doc")[0] == 404
    assert b.request("PUT", f"/{bucket}")[0] == 200
    assert a.request("GET", f"/{bucket}?versioning")[2].count(b"Enabled") == 0


def test_a_key_written_to_the_config_works_at_once_in_every_worker_and_dies_at_once(multi):
    """Each worker notices a rewritten config before it answers its next request (inotify,
    see gateway/watch.py): a new key works at the first request through any worker, and a
    removed one is refused at the first request after; again and again, so an order of events
    that only happens sometimes shows."""
    gw, conns = multi
    admin = {ACCESS: {"secret_key": SECRET, "user": "admin", "admin": True},
             USER_ACCESS: {"secret_key": USER_SECRET, "user": "alice", "admin": False}}

    def status_as(conn, access: str, secret: str) -> int:
        path = "/"
        headers = sign("GET", gw.endpoint + path, access, secret, hashlib.sha256(b"").hexdigest(), {})
        return conn.request("GET", path, headers=headers, signed=False)[0]

    try:
        for round_ in range(10):
            access, secret = f"ROTATED{round_:04d}", f"rotated-secret-{round_}"
            gw.write_config({**admin, access: {"secret_key": secret, "user": "admin", "admin": True}})
            for conn in conns:
                assert status_as(conn, access, secret) == 200, (round_, conn.worker)
            gw.write_config(admin)
            for conn in conns:
                assert status_as(conn, access, secret) == 403, (round_, conn.worker)
    finally:
        gw.write_config(admin)


def test_snapshot_taken_through_one_worker_holds_versions_in_the_others(multi):
    _, (a, b, c) = multi
    bucket = _new_bucket(a)
    body = (b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<Status>Enabled</Status></VersioningConfiguration>")
    assert a.request("PUT", f"/{bucket}?versioning", body)[0] == 200
    status, headers, _ = b.request("PUT", f"/{bucket}/k", b"v1")
    held = headers["x-amz-version-id"]
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    assert a.request("POST", f"/_strata/admin/buckets/{bucket}/snapshots", json.dumps({"name": "keep"}).encode(),
                     admin, signed=False)[0] == 201
    status, headers, _ = c.request("PUT", f"/{bucket}/k", b"v2")
    free = headers["x-amz-version-id"]
    for conn in (b, c):  # the hold is known to every worker at once
        status, _, xml = conn.request("DELETE", f"/{bucket}/k?versionId={held}")
        assert status == 403 and b"held by snapshot keep" in xml
    assert b.request("DELETE", f"/{bucket}/k?versionId={free}")[0] == 204
    # versioning cannot be suspended through another worker while the snapshot exists
    suspend = body.replace(b"Enabled", b"Suspended")
    assert c.request("PUT", f"/{bucket}?versioning", suspend)[0] == 409


def test_kill9_of_a_worker_mid_puts_loses_no_acknowledged_put():
    with GatewayProcess.running(workers=2) as gw:
        victim, survivor = _wait_workers(gw, 2)
        setup = Conn.to(gw, survivor)
        bucket = _new_bucket(setup)
        sizes = {f"k/{i:04d}": (2000 + i if i % 3 else 400_000 + i) for i in range(400)}
        acked, after_kill = [], []
        lock = threading.Lock()
        killed = threading.Event()
        s3 = gw.client(max_pool_connections=32, connect_timeout=5, read_timeout=30)

        def put(key):
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=_body(key, sizes[key]))
            except Exception:  # noqa: BLE001 - its worker was killed under this request
                return
            with lock:
                acked.append(key)
                if killed.is_set():
                    after_kill.append(key)

        with ThreadPoolExecutor(max_workers=32) as pool:
            futures = [pool.submit(put, key) for key in sizes]
            while len(acked) < 60:
                time.sleep(0.01)
            os.kill(victim, signal.SIGKILL)
            killed.set()
            for f in futures:
                f.result()
        assert after_kill, "the port stopped answering when one worker was killed"
        replaced = _wait_workers(gw, 2, without=victim)
        assert survivor in replaced and victim not in replaced
        for pid in replaced:  # the new worker and the old one read back every acknowledged PUT
            conn = Conn.to(gw, pid)
            for key in acked:
                status, _, data = conn.request("GET", f"/{bucket}/{key}")
                assert status == 200, (key, status)
                assert hashlib.sha256(data).digest() == hashlib.sha256(_body(key, sizes[key])).digest(), key
            conn.close()
        setup.close()
