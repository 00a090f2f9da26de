"""Signatures, presigned URLs, aws-chunked bodies, addressing styles and bad input on the wire.

Every bad request must get its S3 error code and leave the gateway serving.
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import zlib

import pytest
import requests
from botocore.exceptions import ClientError

from services.object.tests import s3raw
from services.object.tests.gatewayproc import ACCESS, SECRET, USER_ACCESS, USER_SECRET


def code_of(exc_info) -> str:
    return exc_info.value.response["Error"]["Code"]


def xml_code(text: str | bytes) -> str:
    text = text.decode(errors="replace") if isinstance(text, bytes) else text
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""


def still_serving(s3, bucket):
    s3.put_object(Bucket=bucket, Key="alive", Body=b"yes")
    assert s3.get_object(Bucket=bucket, Key="alive")["Body"].read() == b"yes"


def test_presigned_get_and_put(s3, bucket):
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pre/put"}, ExpiresIn=300)
    r = requests.put(put_url, data=b"presigned body")
    assert r.status_code == 200, r.text
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre/put"}, ExpiresIn=300)
    r = requests.get(get_url)
    assert r.status_code == 200 and r.content == b"presigned body"
    r = requests.get(get_url.replace("X-Amz-Signature=", "X-Amz-Signature=0"))
    assert r.status_code == 403 and xml_code(r.text) == "SignatureDoesNotMatch"
    r = requests.get(get_url.split("?")[0])
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"


def test_wrong_key_wrong_signature_and_skew(gateway, s3, bucket, monkeypatch):
    with pytest.raises(ClientError) as e:
        gateway.client("NOSUCHKEY", "x").list_objects_v2(Bucket=bucket)
    assert code_of(e) == "InvalidAccessKeyId"
    with pytest.raises(ClientError) as e:
        gateway.client(ACCESS, "wrong-secret").put_object(Bucket=bucket, Key="k", Body=b"x")
    assert code_of(e) == "SignatureDoesNotMatch"
    import datetime

    import botocore.auth
    skewed = datetime.datetime.utcnow() - datetime.timedelta(hours=1)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: skewed)
    with pytest.raises(ClientError) as e:
        gateway.client().list_objects_v2(Bucket=bucket)
    assert code_of(e) == "RequestTimeTooSkewed"
    monkeypatch.undo()
    still_serving(s3, bucket)


def test_sigv4_dated_by_the_date_header(gateway, bucket):
    """A SigV4 request may carry its time in ``Date`` (RFC 1123) instead of X-Amz-Date; the
    string to sign still has it in ISO 8601 basic form (botocore signs so when given a Date)."""
    from email.utils import formatdate

    client = gateway.client()
    stamp = formatdate(usegmt=True)
    sent = []
    client.meta.events.register("before-call.s3.PutObject",
                                lambda params, **_: params["headers"].update({"Date": stamp, "X-Amz-Date": stamp}))
    client.meta.events.register("before-send.s3.PutObject", lambda request, **_: sent.append(dict(request.headers)))
    client.put_object(Bucket=bucket, Key="dated", Body=b"by Date")
    assert "Date" in sent[0] and "X-Amz-Date" not in sent[0]
    assert client.get_object(Bucket=bucket, Key="dated")["Body"].read() == b"by Date"


def test_new_users_take_effect_without_restart(gateway, bucket):
    gateway.write_config({ACCESS: {"secret_key": SECRET, "user": "admin", "admin": True},
                          USER_ACCESS: {"secret_key": USER_SECRET, "user": "alice"},
                          "BOBKEY": {"secret_key": "bob-secret", "user": "bob"}})
    bob = gateway.client("BOBKEY", "bob-secret")
    bob.create_bucket(Bucket="bobs-bucket")
    assert [b["Name"] for b in bob.list_buckets()["Buckets"]] == ["bobs-bucket"]


def _chunked_put(gateway, bucket, key, data, signed, trailer_algo=None, tamper=False):
    url = f"{gateway.endpoint}/{bucket}/{key}"
    mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD" if signed else "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    headers = {"x-amz-decoded-content-length": str(len(data)), "Content-Encoding": "aws-chunked"}
    trailer = None
    if trailer_algo:
        if signed:
            mode += "-TRAILER"
        headers["x-amz-trailer"] = f"x-amz-checksum-{trailer_algo}"
        value = base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        trailer = (f"x-amz-checksum-{trailer_algo}", value)
    encoded_len_probe = s3raw.aws_chunked(data, 64 * 1024, {"X-Amz-Date": "20000101T000000Z",
                                                            "Authorization": "Signature=" + "0" * 64},
                                          SECRET, signed, trailer)
    headers["Content-Length"] = str(len(encoded_len_probe))
    signed_headers = s3raw.sign("PUT", url, ACCESS, SECRET, mode, headers)
    body = s3raw.aws_chunked(data, 64 * 1024, signed_headers, SECRET, signed, trailer)
    if tamper:
        body = body.replace(data[:16], bytes(16), 1)
    return requests.put(url, data=body, headers=signed_headers)


@pytest.mark.parametrize("signed,trailer", [(True, None), (True, "crc32"), (False, "crc32")])
def test_aws_chunked_uploads(gateway, s3, bucket, signed, trailer):
    data = os.urandom(300_000)
    key = f"chunked-{signed}-{trailer}"
    r = _chunked_put(gateway, bucket, key, data, signed, trailer)
    assert r.status_code == 200, r.text
    got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    if trailer:
        assert got["ChecksumCRC32"] == base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_aws_chunked_bad_chunk_signature(gateway, s3, bucket):
    data = os.urandom(200_000)
    r = _chunked_put(gateway, bucket, "tampered", data, True, tamper=True)
    assert r.status_code == 403 and xml_code(r.text) == "SignatureDoesNotMatch"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="tampered")
    still_serving(s3, bucket)


def test_crc32c_header_checksum(gateway, s3, bucket):
    crc32c = pytest.importorskip("crc32c")
    data = b"c" * 5000
    value = base64.b64encode(crc32c.crc32c(data).to_bytes(4, "big")).decode()
    url = f"{gateway.endpoint}/{bucket}/crc32c"
    sha = hashlib.sha256(data).hexdigest()
    r = requests.put(url, data=data, headers=s3raw.sign("PUT", url, ACCESS, SECRET, sha,
                                                        {"x-amz-checksum-crc32c": value}))
    assert r.status_code == 200 and r.headers["x-amz-checksum-crc32c"] == value
    bad = base64.b64encode(b"\0\0\0\0").decode()
    r = requests.put(url + "2", data=data, headers=s3raw.sign("PUT", url + "2", ACCESS, SECRET, sha,
                                                              {"x-amz-checksum-crc32c": bad}))
    assert r.status_code == 400 and xml_code(r.text) == "BadDigest"


def test_virtual_host_style(gateway, s3, bucket):
    s3.put_object(Bucket=bucket, Key="vh/key.txt", Body=b"virtual")
    host = f"{bucket}.localhost:{gateway.port}"
    headers = s3raw.sign("GET", f"http://{host}/vh/key.txt", ACCESS, SECRET)
    headers["Host"] = host
    r = requests.get(f"{gateway.endpoint}/vh/key.txt", headers=headers)
    assert r.status_code == 200 and r.content == b"virtual"
    headers = s3raw.sign("GET", f"http://{host}/?list-type=2", ACCESS, SECRET)
    headers["Host"] = host
    r = requests.get(f"{gateway.endpoint}/?list-type=2", headers=headers)
    assert r.status_code == 200 and "<Key>vh/key.txt</Key>" in r.text


def test_payload_hash_mismatch(gateway, s3, bucket):
    url = f"{gateway.endpoint}/{bucket}/hashmismatch"
    headers = s3raw.sign("PUT", url, ACCESS, SECRET, hashlib.sha256(b"other").hexdigest())
    r = requests.put(url, data=b"actual", headers=headers)
    assert r.status_code == 400 and xml_code(r.text) == "XAmzContentSHA256Mismatch"


def test_malformed_xml(gateway, s3, bucket):
    for query in ("delete", "versioning", "tagging"):
        key = "" if query != "tagging" else "alive"
        s3.put_object(Bucket=bucket, Key="alive", Body=b"x")
        url = f"{gateway.endpoint}/{bucket}/{key}?{query}"
        body = b"<Delete><Object><Key>unterminated"
        method = "POST" if query == "delete" else "PUT"
        headers = s3raw.sign(method, url, ACCESS, SECRET, hashlib.sha256(body).hexdigest(),
                             {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()})
        r = requests.request(method, url, data=body, headers=headers)
        assert r.status_code == 400 and xml_code(r.text) == "MalformedXML", (query, r.text)
    still_serving(s3, bucket)


def test_body_shorter_than_content_length(gateway, s3, bucket):
    url = f"{gateway.endpoint}/{bucket}/short"
    headers = s3raw.sign("PUT", url, ACCESS, SECRET, "UNSIGNED-PAYLOAD", {"Content-Length": "1000"})
    status, _ = s3raw.raw_request(url, "PUT", headers, b"only-ten-b", close_write=True)
    assert status in (0, 400)  # 400 IncompleteBody, or the connection is simply closed
    big = f"{gateway.endpoint}/{bucket}/short-large"
    headers = s3raw.sign("PUT", big, ACCESS, SECRET, "UNSIGNED-PAYLOAD", {"Content-Length": str(10 << 20)})
    s3raw.raw_request(big, "PUT", headers, os.urandom(1 << 20), close_write=True)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert "short" not in keys and "short-large" not in keys
    still_serving(s3, bucket)


@pytest.mark.parametrize("digest", ["crc32", "md5"])
def test_body_longer_than_content_length_gets_its_answer(gateway, s3, bucket, digest):
    """A client sends more bytes than its Content-Length says, on a kept-alive connection:
    the request (the first Content-Length bytes) is answered as S3 answers it, 400 BadDigest
    (its checksum header covers the whole body), then the connection closes; the bytes after
    it are not taken for a request of their own (no bare 400 in place of the answer)."""
    body = b"bar"
    stated = ({"x-amz-checksum-crc32": base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()}
              if digest == "crc32" else {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()})
    url = f"{gateway.endpoint}/{bucket}/longer"
    headers = s3raw.sign("PUT", url, ACCESS, SECRET, "UNSIGNED-PAYLOAD", {"Content-Length": "2", **stated})
    host, port = gateway.endpoint.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(s3raw.request_head("PUT", url, headers) + body)
        with sock.makefile("rb") as fh:
            status, head, answer = s3raw.read_response(fh, "PUT")
            assert (status, xml_code(answer)) == (400, "BadDigest")
            assert head["connection"] == "close"
            assert fh.read() == b""
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="longer")
    still_serving(s3, bucket)


def test_key_too_long_and_unknown_subresource(gateway, s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="k" * 1025, Body=b"x")
    assert code_of(e) == "KeyTooLongError"
    s3.put_object(Bucket=bucket, Key="k" * 1024, Body=b"x")
    url = f"{gateway.endpoint}/{bucket}?analytics"
    r = requests.get(url, headers=s3raw.sign("GET", url, ACCESS, SECRET))
    assert r.status_code == 501 and xml_code(r.text) == "NotImplemented"
    url = f"{gateway.endpoint}/{bucket}?list-type=2&made-up-parameter=1"
    r = requests.get(url, headers=s3raw.sign("GET", url, ACCESS, SECRET))
    assert r.status_code == 200  # S3 ignores query parameters it does not know
    url = f"{gateway.endpoint}/{bucket}?list-type=2&max-keys=-1"
    r = requests.get(url, headers=s3raw.sign("GET", url, ACCESS, SECRET))
    assert r.status_code == 400 and xml_code(r.text) == "InvalidArgument"
    still_serving(s3, bucket)


def test_aws_cli(gateway, bucket, tmp_path):
    aws = shutil.which("aws", path=os.path.dirname(sys.executable)) or shutil.which("aws")
    if not aws:
        pytest.skip("the aws CLI (PyPI awscli) is not installed")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
    src = tmp_path / "f.bin"
    data = os.urandom(12 << 20)  # above the CLI's 8 MiB multipart threshold
    src.write_bytes(data)

    def cli(*args):
        return subprocess.run([aws, "--endpoint-url", gateway.endpoint, "s3", *args], env=env, check=True,
                              capture_output=True, text=True, timeout=60).stdout

    cli("cp", str(src), f"s3://{bucket}/cli/f.bin")
    assert "cli/f.bin" in cli("ls", "--recursive", f"s3://{bucket}/")
    cli("cp", f"s3://{bucket}/cli/f.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == data
    cli("rm", f"s3://{bucket}/cli/f.bin")
    assert "cli/f.bin" not in cli("ls", "--recursive", f"s3://{bucket}/")


def test_pipelined_requests_get_whole_responses_in_order(s3, gateway, bucket):
    """Several requests sent at once on one connection: each answer (headers, then its body)
    arrives whole and in order, small and block-sized objects alike."""
    small, large = os.urandom(4096), os.urandom(300 * 1024)
    s3.put_object(Bucket=bucket, Key="small", Body=small)
    s3.put_object(Bucket=bucket, Key="large", Body=large)
    plan = [("HEAD", "small"), ("GET", "small"), ("GET", "large"), ("HEAD", "large"), ("GET", "small")]
    netloc = gateway.endpoint.rsplit("/", 1)[1]
    wire = b""
    for i, (method, key) in enumerate(plan):
        url = f"{gateway.endpoint}/{bucket}/{key}"
        headers = s3raw.sign(method, url, ACCESS, SECRET)
        if i == len(plan) - 1:
            headers["Connection"] = "close"
        wire += s3raw.request_head(method, url, headers)
    host, port = netloc.split(":")
    bodies = {"small": small, "large": large}
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(wire)
        with sock.makefile("rb") as fh:
            for method, key in plan:
                status, headers, body = s3raw.read_response(fh, method)
                assert status == 200
                assert headers["content-length"] == str(len(bodies[key]))
                assert headers["server"] == "Strata"
                assert body == (b"" if method == "HEAD" else bodies[key])
            assert fh.read() == b""  # nothing more: the last request closed the connection
