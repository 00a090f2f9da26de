"""Multipart uploads through boto3: errors, copy parts, listings, and a large upload by hash."""
from __future__ import annotations

import base64
import hashlib
import io
import os

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

MIB = 1024 * 1024
LARGE_UPLOAD_BYTES = 1024 * MIB  # a 1 GiB multipart upload, read back by hash


def code_of(exc_info) -> str:
    return exc_info.value.response["Error"]["Code"]


def test_multipart_roundtrip_and_errors(s3, bucket):
    key = "mp/obj"
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, ContentType="application/x-ckpt",
                                    Metadata={"rank": "3"})["UploadId"]
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), b"tail"]
    etags = [s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=i + 1, Body=p)["ETag"]
             for i, p in enumerate(parts)]
    listed = s3.list_parts(Bucket=bucket, Key=key, UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in listed] == [(1, 5 * MIB), (2, 5 * MIB), (3, 4)]
    assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [up]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": [
            {"PartNumber": 2, "ETag": etags[1]}, {"PartNumber": 1, "ETag": etags[0]}]})
    assert code_of(e) == "InvalidPartOrder"
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": '"0123456789abcdef0123456789abcdef"'}]})
    assert code_of(e) == "InvalidPart"
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": [
            {"PartNumber": 3, "ETag": etags[2]}, {"PartNumber": 4, "ETag": etags[2]}]})
    assert code_of(e) == "InvalidPart"
    # only the last part may be small; parts need not be contiguous
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": etags[0]}, {"PartNumber": 3, "ETag": etags[2]}]})
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == parts[0] + parts[2]


def test_entity_too_small_and_abort(s3, bucket):
    key = "mp/small"
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=b"a" * 100)["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=2, Body=b"b" * 100)["ETag"]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert code_of(e) == "EntityTooSmall"
    s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=up)
    with pytest.raises(ClientError) as e:
        s3.list_parts(Bucket=bucket, Key=key, UploadId=up)
    assert code_of(e) == "NoSuchUpload"
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key=key, UploadId="ffff", PartNumber=1, Body=b"x")
    assert code_of(e) == "NoSuchUpload"
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="mp/small")


def test_multipart_etag_and_complete_without_contents(s3, bucket):
    key = "mp/etag"
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    p1, p2 = os.urandom(5 * MIB), os.urandom(1000)
    e1 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=p1)["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=2, Body=p2)["ETag"]
    r = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    want = hashlib.md5(hashlib.md5(p1).digest() + hashlib.md5(p2).digest()).hexdigest() + "-2"
    assert r["ETag"] == f'"{want}"'
    head = s3.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == len(p1) + len(p2) and head["ETag"] == f'"{want}"'
    rng = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={5 * MIB - 10}-{5 * MIB + 9}")["Body"].read()
    assert rng == p1[-10:] + p2[:10]


def test_composite_checksum_of_parts(s3, bucket):
    key = "mp/checked"
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256")["UploadId"]
    parts = [os.urandom(5 * MIB), os.urandom(1234)]
    done = [s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=i + 1, Body=p, ChecksumAlgorithm="SHA256")
            for i, p in enumerate(parts)]
    digests = [hashlib.sha256(p).digest() for p in parts]
    assert [d["ChecksumSHA256"] for d in done] == [base64.b64encode(d).decode() for d in digests]
    with pytest.raises(ClientError) as e:  # a part checksum that is not the uploaded part's
        s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": done[0]["ETag"], "ChecksumSHA256": done[1]["ChecksumSHA256"]},
            {"PartNumber": 2, "ETag": done[1]["ETag"], "ChecksumSHA256": done[1]["ChecksumSHA256"]}]})
    assert code_of(e) == "InvalidPart"
    r = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": n + 1, "ETag": d["ETag"], "ChecksumSHA256": d["ChecksumSHA256"]} for n, d in enumerate(done)]})
    want = base64.b64encode(hashlib.sha256(b"".join(digests)).digest()).decode() + "-2"
    assert r["ChecksumSHA256"] == want
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == want and head["ChecksumType"] == "COMPOSITE"
    got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert got["ChecksumSHA256"] == want and got["Body"].read() == b"".join(parts)
    attrs = s3.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=[
        "ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"])
    assert attrs["Checksum"] == {"ChecksumSHA256": want, "ChecksumType": "COMPOSITE"}
    assert attrs["ObjectParts"]["TotalPartsCount"] == 2 and attrs["ObjectSize"] == 5 * MIB + 1234
    assert attrs["StorageClass"] == "STANDARD" and f'"{attrs["ETag"]}"' == r["ETag"]
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256", ChecksumType="FULL_OBJECT")
    assert code_of(e) == "InvalidRequest"  # FULL_OBJECT checksums are CRCs


def test_upload_part_copy(s3, bucket):
    src = os.urandom(6 * MIB)
    s3.put_object(Bucket=bucket, Key="copysrc", Body=src)
    up = s3.create_multipart_upload(Bucket=bucket, Key="assembled")["UploadId"]
    r1 = s3.upload_part_copy(Bucket=bucket, Key="assembled", UploadId=up, PartNumber=1,
                             CopySource={"Bucket": bucket, "Key": "copysrc"})
    r2 = s3.upload_part_copy(Bucket=bucket, Key="assembled", UploadId=up, PartNumber=2,
                             CopySource={"Bucket": bucket, "Key": "copysrc"}, CopySourceRange="bytes=0-99")
    s3.complete_multipart_upload(Bucket=bucket, Key="assembled", UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": r1["CopyPartResult"]["ETag"]},
        {"PartNumber": 2, "ETag": r2["CopyPartResult"]["ETag"]}]})
    assert s3.get_object(Bucket=bucket, Key="assembled")["Body"].read() == src + src[:100]


class GeneratedBody(io.RawIOBase):
    """``size`` bytes made on the fly (1 MiB of random bytes, each MiB stamped with its index),
    hashed as they are read: a 1 GiB upload without a 1 GiB file or buffer."""

    def __init__(self, size: int):
        self.size, self.pos = size, 0
        self.block = os.urandom(MIB)
        self.sha256 = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        n = self.size - self.pos if n is None or n < 0 else min(n, self.size - self.pos)
        while len(out) < n:
            index, offset = divmod(self.pos, MIB)
            chunk = (self.block[:-8] + index.to_bytes(8, "big"))[offset: offset + n - len(out)]
            out += chunk
            self.pos += len(chunk)
        self.sha256.update(out)
        return bytes(out)

    def readinto(self, buf) -> int:
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)


def test_large_multipart_upload_read_back_by_hash(s3, bucket):
    """1 GiB through boto3's transfer manager (8 MiB parts, 8 threads), read back by SHA-256."""
    body = GeneratedBody(LARGE_UPLOAD_BYTES)
    cfg = TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB, max_concurrency=8)
    s3.upload_fileobj(body, bucket, "large.bin", Config=cfg)
    assert body.pos == LARGE_UPLOAD_BYTES
    head = s3.head_object(Bucket=bucket, Key="large.bin")
    assert head["ContentLength"] == LARGE_UPLOAD_BYTES
    assert head["ETag"].endswith(f'-{LARGE_UPLOAD_BYTES // (8 * MIB)}"')
    # boto3 sends CRC32s of the parts: the object keeps their composite
    checked = s3.head_object(Bucket=bucket, Key="large.bin", ChecksumMode="ENABLED")
    assert checked["ChecksumCRC32"].endswith(f"-{LARGE_UPLOAD_BYTES // (8 * MIB)}")
    got = hashlib.sha256()
    stream = s3.get_object(Bucket=bucket, Key="large.bin")["Body"]
    for chunk in iter(lambda: stream.read(4 * MIB), b""):
        got.update(chunk)
    assert got.hexdigest() == body.sha256.hexdigest()
    s3.delete_object(Bucket=bucket, Key="large.bin")  # 1 GiB less on the shared disk
