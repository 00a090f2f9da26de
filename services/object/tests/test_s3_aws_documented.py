"""Behaviour AWS documents for S3 that the gateway follows (issues 33 and 34): each case
asserts AWS's status, error code and headers, with boto3 or a raw request signed by botocore.
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import os
import uuid
import xml.etree.ElementTree as ET

import pytest
import requests
from botocore.exceptions import ClientError

from services.object.tests import s3raw
from services.object.tests.gatewayproc import ACCESS, ADMIN_TOKEN, SECRET, USER_ACCESS, USER_SECRET

MIB = 1024 * 1024
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def error_of(exc_info) -> tuple[int, str]:
    r = exc_info.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def xml_code(r: requests.Response) -> str:
    return r.text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in r.text else ""


def b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def _sha256_upload(s3, bucket: str, key: str, parts: list[bytes]) -> tuple[str, list[dict]]:
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256")["UploadId"]
    done = []
    for n, data in enumerate(parts, 1):
        res = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=data,
                             ChecksumAlgorithm="SHA256")
        done.append({"PartNumber": n, "ETag": res["ETag"], "ChecksumSHA256": res["ChecksumSHA256"]})
    return up, done


def _composite_sha256(parts: list[bytes]) -> str:
    inner = b"".join(hashlib.sha256(p).digest() for p in parts)
    return f"{b64(hashlib.sha256(inner).digest())}-{len(parts)}"


# CompleteMultipartUpload with a whole-object checksum

def test_complete_checks_the_whole_object_checksum_it_is_given(s3, bucket):
    parts = [b"a" * (5 * MIB), b"tail"]
    up, done = _sha256_upload(s3, bucket, "mp", parts)
    wrong = _composite_sha256([b"other", b"parts"])
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": done},
                                     ChecksumSHA256=wrong)
    assert error_of(e) == (400, "BadDigest")
    assert "SHA256 you specified did not match" in e.value.response["Error"]["Message"]
    # without its -N, and with a part count that is not the upload's
    for value in (wrong.split("-")[0], _composite_sha256(parts).split("-")[0] + "-3"):
        with pytest.raises(ClientError) as e:
            s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": done},
                                         ChecksumSHA256=value)
        assert error_of(e) == (400, "BadDigest"), value
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": done},
                                     ChecksumSHA256="not-a-checksum")
    assert error_of(e) == (400, "InvalidRequest")
    assert "x-amz-checksum-sha256" in e.value.response["Error"]["Message"]
    # an algorithm the upload has no checksum of
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": done},
                                     ChecksumSHA1=b64(hashlib.sha1(b"x").digest()))
    assert error_of(e) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="mp")
    assert error_of(e) == (404, "404")  # every refused Complete left nothing behind
    res = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": done},
                                       ChecksumSHA256=_composite_sha256(parts))
    assert res["ChecksumSHA256"] == _composite_sha256(parts)
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"".join(parts)


def test_complete_with_the_checksum_without_its_part_count(s3, bucket):
    parts = [b"b" * (5 * MIB), b"end"]
    up, done = _sha256_upload(s3, bucket, "mp2", parts)
    res = s3.complete_multipart_upload(Bucket=bucket, Key="mp2", UploadId=up, MultipartUpload={"Parts": done},
                                       ChecksumSHA256=_composite_sha256(parts).split("-")[0])
    assert res["ChecksumSHA256"] == _composite_sha256(parts)


# GET/HEAD ?partNumber=N with checksum mode

def test_part_number_with_checksum_mode_answers_that_parts_checksum(s3, bucket):
    parts = [b"1" * (5 * MIB), b"second part"]
    up, done = _sha256_upload(s3, bucket, "parts", parts)
    s3.complete_multipart_upload(Bucket=bucket, Key="parts", UploadId=up, MultipartUpload={"Parts": done})
    for n, data in enumerate(parts, 1):
        want = b64(hashlib.sha256(data).digest())
        head = s3.head_object(Bucket=bucket, Key="parts", PartNumber=n, ChecksumMode="ENABLED")
        assert (head["ChecksumSHA256"], head["ChecksumType"]) == (want, "COMPOSITE")
        assert head["PartsCount"] == 2 and head["ContentLength"] == len(data)
        got = s3.get_object(Bucket=bucket, Key="parts", PartNumber=n, ChecksumMode="ENABLED")
        assert got["ChecksumSHA256"] == want and got["Body"].read() == data  # botocore checks it too
    # without checksum mode, none; the whole object keeps its composite value
    assert "ChecksumSHA256" not in s3.head_object(Bucket=bucket, Key="parts", PartNumber=1)
    whole = s3.head_object(Bucket=bucket, Key="parts", ChecksumMode="ENABLED")
    assert whole["ChecksumSHA256"] == _composite_sha256(parts)


# Content-Encoding: gzip, aws-chunked on a plain body

@pytest.mark.parametrize("payload", ["UNSIGNED-PAYLOAD", "sha256"])
def test_aws_chunked_content_encoding_on_a_plain_body(gateway, s3, bucket, payload):
    data = gzip.compress(b"compressed text " * 1000)
    key = f"gz-{payload}"
    url = f"{gateway.endpoint}/{bucket}/{key}"
    mode = hashlib.sha256(data).hexdigest() if payload == "sha256" else payload
    headers = s3raw.sign("PUT", url, ACCESS, SECRET, mode, {"Content-Encoding": "gzip, aws-chunked",
                                                             "Content-Type": "text/plain"})
    r = requests.put(url, data=data, headers=headers)
    assert r.status_code == 200, r.text
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["ContentEncoding"] == "gzip"  # aws-chunked dropped, as S3 stores it
    assert got["Body"].read() == data and got["ContentLength"] == len(data)


# POST Object: ["starts-with", "$field", ""]

def test_post_starts_with_empty_matches_a_field_left_out(s3, bucket):
    form = s3.generate_presigned_post(bucket, "form-${filename}", Conditions=[
        ["starts-with", "$Content-Type", ""], ["starts-with", "$x-amz-meta-tag", ""]], ExpiresIn=300)
    r = requests.post(form["url"], data=form["fields"], files={"file": ("a.txt", b"no type")})
    assert r.status_code == 204, r.text
    assert s3.get_object(Bucket=bucket, Key="form-a.txt")["Body"].read() == b"no type"
    fields = {**form["fields"], "Content-Type": "text/csv", "x-amz-meta-tag": "t"}
    r = requests.post(form["url"], data=fields, files={"file": ("b.txt", b"typed")})
    assert r.status_code == 204, r.text
    assert s3.head_object(Bucket=bucket, Key="form-b.txt")["ContentType"] == "text/csv"
    # a non-empty prefix still needs the field
    strict = s3.generate_presigned_post(bucket, "strict", Conditions=[["starts-with", "$Content-Type", "text/"]])
    r = requests.post(strict["url"], data=strict["fields"], files={"file": ("c.txt", b"x")})
    assert (r.status_code, xml_code(r)) == (403, "AccessDenied")


# ListParts: the Owner is the bucket owner

def test_list_parts_names_the_bucket_owner_as_owner(gateway, s3):
    alice = gateway.client(USER_ACCESS, USER_SECRET)
    name = f"lp-{uuid.uuid4().hex[:12]}"
    alice.create_bucket(Bucket=name)
    up = s3.create_multipart_upload(Bucket=name, Key="k")["UploadId"]  # the admin uploads
    s3.upload_part(Bucket=name, Key="k", UploadId=up, PartNumber=1, Body=b"part")
    listed = s3.list_parts(Bucket=name, Key="k", UploadId=up)
    assert listed["Owner"]["ID"] == "alice"
    assert listed["Initiator"]["ID"] == "admin"


# DeleteObjects: Content-MD5 (or an x-amz-checksum-*) required and checked; Quiet a boolean

def _delete_objects(gateway, bucket: str, body: bytes, extra: dict) -> requests.Response:
    url = f"{gateway.endpoint}/{bucket}?delete"
    headers = s3raw.sign("POST", url, ACCESS, SECRET, hashlib.sha256(body).hexdigest(), extra)
    return requests.post(url, data=body, headers=headers)


def test_delete_objects_needs_and_checks_a_digest(gateway, s3, bucket):
    s3.put_object(Bucket=bucket, Key="victim", Body=b"x")
    body = b"<Delete><Object><Key>victim</Key></Object></Delete>"
    r = _delete_objects(gateway, bucket, body, {})
    assert (r.status_code, xml_code(r)) == (400, "InvalidRequest")
    assert "Missing required header for this request: Content-Md5" in r.text
    r = _delete_objects(gateway, bucket, body, {"Content-MD5": b64(hashlib.md5(b"other").digest())})
    assert (r.status_code, xml_code(r)) == (400, "BadDigest")
    r = _delete_objects(gateway, bucket, body, {"Content-MD5": "not base64!"})
    assert (r.status_code, xml_code(r)) == (400, "InvalidDigest")
    r = _delete_objects(gateway, bucket, body, {"x-amz-checksum-sha256": b64(hashlib.sha256(b"other").digest())})
    assert (r.status_code, xml_code(r)) == (400, "BadDigest")
    assert s3.head_object(Bucket=bucket, Key="victim")["ContentLength"] == 1  # still there
    r = _delete_objects(gateway, bucket, body, {"x-amz-checksum-sha256": b64(hashlib.sha256(body).digest())})
    assert r.status_code == 200 and "<Deleted><Key>victim</Key>" in r.text
    s3.put_object(Bucket=bucket, Key="victim", Body=b"x")
    r = _delete_objects(gateway, bucket, body, {"Content-MD5": b64(hashlib.md5(body).digest())})
    assert r.status_code == 200 and "<Deleted><Key>victim</Key>" in r.text
    # boto3 sends its own checksum
    s3.put_object(Bucket=bucket, Key="victim", Body=b"x")
    assert s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "victim"}]})["Deleted"][0]["Key"] == "victim"


def test_delete_objects_quiet_must_be_a_boolean(gateway, s3, bucket):
    s3.put_object(Bucket=bucket, Key="q", Body=b"x")
    for quiet in ("maybe", "1", ""):
        body = f"<Delete><Quiet>{quiet}</Quiet><Object><Key>q</Key></Object></Delete>".encode()
        r = _delete_objects(gateway, bucket, body, {"Content-MD5": b64(hashlib.md5(body).digest())})
        assert (r.status_code, xml_code(r)) == (400, "MalformedXML"), quiet
    assert s3.head_object(Bucket=bucket, Key="q")["ContentLength"] == 1
    body = b"<Delete><Quiet>TRUE</Quiet><Object><Key>q</Key></Object></Delete>"
    r = _delete_objects(gateway, bucket, body, {"Content-MD5": b64(hashlib.md5(body).digest())})
    assert r.status_code == 200 and "<Deleted>" not in r.text


# Listing keys with control characters without EncodingType=url

def _raw_list(gateway, bucket: str, query: str) -> requests.Response:
    url = f"{gateway.endpoint}/{bucket}?{query}"
    return requests.get(url, headers=s3raw.sign("GET", url, ACCESS, SECRET, s3raw.EMPTY))


def test_listing_keys_with_line_breaks_and_tabs_parse_back_exactly(gateway, s3, bucket):
    """CR, CR LF, LF and TAB are written as character references, as S3 writes them, so an XML
    parser hands back the key that was stored (a literal CR would come back as LF)."""
    keys = ["cr\rkey", "crlf\r\nkey", "lf\nkey", "tab\tkey"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    for query in ("list-type=2", "", "versions"):
        r = _raw_list(gateway, bucket, query)
        assert r.status_code == 200, r.text
        assert b"\r" not in r.content and b"&#xD;" in r.content
        root = ET.fromstring(r.content)
        tag = "Version" if query == "versions" else "Contents"
        assert sorted(e.findtext(f"{NS}Key") for e in root.iter(f"{NS}{tag}")) == sorted(keys), query
    for key in keys:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"x"


def test_listing_keys_with_other_control_characters(gateway, s3, bucket):
    """A C0 control other than TAB, LF and CR has no place in XML 1.0, not even as a reference:
    S3 writes it as a character reference (``&#x1;``), never as the raw byte, and so does the
    gateway; clients list such keys with EncodingType=url (boto3 always does)."""
    key = "ctl\x01\x1fkey"
    s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    r = _raw_list(gateway, bucket, "list-type=2")
    assert r.status_code == 200
    assert b"<Key>ctl&#x1;&#x1F;key</Key>" in r.content and b"\x01" not in r.content
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == [key]
    r = _raw_list(gateway, bucket, "list-type=2&encoding-type=url")
    assert "<Key>ctl%01%1Fkey</Key>" in r.text
    ET.fromstring(r.content)


# The admin bucket listing while another worker deletes a bucket

def test_admin_listing_skips_a_bucket_deleted_meanwhile(fresh_gateway):
    """Another worker's delete renames the bucket's directory away before this worker sees
    the change; a listing in between leaves the bucket out instead of answering 500."""
    s3 = fresh_gateway.client()
    s3.create_bucket(Bucket="stays")
    s3.create_bucket(Bucket="goes")
    url = f"{fresh_gateway.endpoint}/_strata/admin/buckets"
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    # this worker has seen both buckets (ListBuckets does not open their indexes)
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["goes", "stays"]
    base = os.path.join(fresh_gateway.data_root, "buckets")
    # what BucketStore.delete does in the other worker, up to (not including) its announcement
    os.rename(os.path.join(base, "goes"), os.path.join(base, f".trash-goes-{uuid.uuid4().hex[:8]}"))
    r = requests.get(url, headers=auth)
    assert r.status_code == 200, r.text
    assert [b["name"] for b in r.json()["buckets"]] == ["stays"]
    # and once the index is open (it outlives the rename), the same
    s3.create_bucket(Bucket="goes-too")
    assert [b["name"] for b in requests.get(url, headers=auth).json()["buckets"]] == ["goes-too", "stays"]
    os.rename(os.path.join(base, "goes-too"), os.path.join(base, f".trash-goes-too-{uuid.uuid4().hex[:8]}"))
    assert [b["name"] for b in requests.get(url, headers=auth).json()["buckets"]] == ["stays"]
