"""GETs of file-backed objects leave through sendfile (see gateway/httpproto.py): the bytes a
client gets are the object's, whole or in ranges, across the parts of a multipart object; a
reader that is slow keeps the version it started even when the object is overwritten and its
file removed meanwhile; a client that goes away mid-body costs the gateway nothing more, and
keep-alive connections go on serving the next request after a zero-copy body."""
from __future__ import annotations

import http.client
import os
import socket
import time
from urllib.parse import urlsplit

from tests.kit import wait_for
from services.object.tests.gatewayproc import ACCESS, SECRET
from services.object.tests.s3raw import read_response, request_head, sign

KIB, MIB = 1024, 1024 * 1024


def _signed_get(gateway, path: str, headers: dict | None = None) -> tuple[str, dict]:
    url = f"{gateway.endpoint}{path}"
    return url, sign("GET", url, ACCESS, SECRET, headers=headers)


def test_whole_and_ranged_gets_of_large_objects_match(s3, bucket):
    data = os.urandom(3 * MIB + 12345)
    s3.put_object(Bucket=bucket, Key="big", Body=data)
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == data
    for rng, want in (("bytes=0-0", data[:1]), ("bytes=100-200000", data[100:200001]),
                      (f"bytes={MIB - 5}-{2 * MIB + 5}", data[MIB - 5:2 * MIB + 6]),
                      ("bytes=-70000", data[-70000:]), (f"bytes={3 * MIB}-", data[3 * MIB:])):
        got = s3.get_object(Bucket=bucket, Key="big", Range=rng)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentLength"] == len(want)
        assert got["Body"].read() == want, rng


def test_multipart_object_reads_back_across_parts(s3, bucket):
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB + 7), os.urandom(300 * KIB)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")
    etags = [s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=i + 1, Body=p)["ETag"]
             for i, p in enumerate(parts)]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"], MultipartUpload={
        "Parts": [{"PartNumber": i + 1, "ETag": e} for i, e in enumerate(etags)]})
    data = b"".join(parts)
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == data
    start, end = 5 * MIB - 100, 10 * MIB + 200   # the end of part 1 to inside part 3
    got = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={start}-{end}")
    assert got["Body"].read() == data[start:end + 1]
    assert s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)["Body"].read() == parts[1]


def test_slow_reader_keeps_its_version_while_the_object_is_overwritten(gateway, s3, bucket):
    old, new = os.urandom(16 * MIB), os.urandom(16 * MIB)
    s3.put_object(Bucket=bucket, Key="obj", Body=old)
    url, headers = _signed_get(gateway, f"/{bucket}/obj")
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", parts.path, headers=headers)
    resp = conn.getresponse()
    assert resp.status == 200
    first = resp.read(64 * KIB)   # the rest waits in the socket: the sender is blocked
    s3.put_object(Bucket=bucket, Key="obj", Body=new)
    data_dir = os.path.join(gateway.data_root, "buckets", bucket, "data")
    wait_for(lambda: sum(len(f) for _, _, f in os.walk(data_dir)) == 1, 10,
             "the replaced version's file to be removed")
    rest = resp.read()
    conn.close()
    assert first + rest == old
    assert s3.get_object(Bucket=bucket, Key="obj")["Body"].read() == new


def test_keep_alive_connection_serves_requests_after_zero_copy_bodies(gateway, s3, bucket):
    big, small = os.urandom(2 * MIB + 1), os.urandom(3000)
    s3.put_object(Bucket=bucket, Key="big", Body=big)
    s3.put_object(Bucket=bucket, Key="small", Body=small)
    parts = urlsplit(gateway.endpoint)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    for key, want in (("big", big), ("small", small), ("big", big), ("missing", None), ("big", big)):
        _, headers = _signed_get(gateway, f"/{bucket}/{key}")
        conn.request("GET", f"/{bucket}/{key}", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if want is None:
            assert resp.status == 404 and b"NoSuchKey" in body
        else:
            assert resp.status == 200 and body == want
    conn.request("HEAD", f"/{bucket}/big", headers=sign("HEAD", f"{gateway.endpoint}/{bucket}/big", ACCESS, SECRET))
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-length") == str(len(big)) and resp.read() == b""
    conn.close()


def test_client_gone_mid_body_leaves_the_gateway_serving(gateway, s3, bucket):
    data = os.urandom(32 * MIB)
    s3.put_object(Bucket=bucket, Key="obj", Body=data)
    url, headers = _signed_get(gateway, f"/{bucket}/obj")
    parts = urlsplit(url)
    for _ in range(5):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
        sock.sendall(request_head("GET", url, headers))
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()   # a reset, with most of the body unsent
    for _ in range(3):
        assert s3.get_object(Bucket=bucket, Key="obj")["Body"].read() == data


def test_pipelined_gets_behind_an_unread_response_arrive_whole(gateway, s3, bucket):
    """Zero-copy bodies of pipelined requests, queued behind copied (SSE) bodies the client has
    not read yet, leave after them, in order."""
    encrypted, plain = os.urandom(16 * MIB), os.urandom(MIB + 3)
    s3.put_object(Bucket=bucket, Key="enc", Body=encrypted, ServerSideEncryption="AES256")
    s3.put_object(Bucket=bucket, Key="plain", Body=plain)
    parts = urlsplit(gateway.endpoint)
    requests = b""
    for key in ("enc", "plain", "enc", "plain"):
        url, headers = _signed_get(gateway, f"/{bucket}/{key}")
        requests += request_head("GET", url, headers)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(requests)
        time.sleep(1.0)  # the first body fills the socket and uvloop's buffer meanwhile
        with sock.makefile("rb") as fh:
            for want in (encrypted, plain, encrypted, plain):
                status, _, body = read_response(fh)
                assert status == 200 and body == want
