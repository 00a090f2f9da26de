"""Additional checksums through boto3: CRC64NVME on PUT/GET/HEAD, FULL_OBJECT and COMPOSITE
checksums of multipart uploads, and every GetObjectAttributes field with part pages."""
from __future__ import annotations

import base64
import os
import zlib

import pytest
from anycrc import Model
from botocore.exceptions import ClientError
from crc32c import crc32c

MIB = 1024 * 1024


def error_of(exc_info) -> tuple[int, str]:
    resp = exc_info.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


def crc64nvme(data: bytes) -> str:
    """CRC-64/NVME as S3 sends it (base64), from anycrc (checked against :func:`bitwise_crc64nvme`)."""
    return base64.b64encode(Model("CRC64-NVME").calc(data).to_bytes(8, "big")).decode()


def bitwise_crc64nvme(data: bytes) -> str:
    """CRC-64/NVME, bit by bit: a reference independent of any library (small data only)."""
    poly, crc = 0x9A6C9329AC4BC9B5, 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return base64.b64encode((crc ^ 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")).decode()


def b64crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_crc64nvme_reference():
    assert base64.b64decode(bitwise_crc64nvme(b"123456789")).hex() == "ae8b14860a799888"
    data = os.urandom(4096)
    assert crc64nvme(data) == bitwise_crc64nvme(data)


def test_crc64nvme_put_get_head(s3, bucket):
    body = bytes(range(256)) * 40
    value = crc64nvme(body)
    put = s3.put_object(Bucket=bucket, Key="c64", Body=body, ChecksumCRC64NVME=value)
    assert put["ChecksumCRC64NVME"] == value
    head = s3.head_object(Bucket=bucket, Key="c64", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC64NVME"], head["ChecksumType"]) == (value, "FULL_OBJECT")
    got = s3.get_object(Bucket=bucket, Key="c64", ChecksumMode="ENABLED")
    assert got["ChecksumCRC64NVME"] == value and got["Body"].read() == body
    attrs = s3.get_object_attributes(Bucket=bucket, Key="c64", ObjectAttributes=["Checksum"])
    assert attrs["Checksum"] == {"ChecksumCRC64NVME": value, "ChecksumType": "FULL_OBJECT"}
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=body, ChecksumCRC64NVME=crc64nvme(b"other"))
    assert error_of(e) == (400, "BadDigest")


def _upload(s3, bucket, key, parts, **create):
    up = s3.create_multipart_upload(Bucket=bucket, Key=key, **create)["UploadId"]
    done = []
    for n, data in enumerate(parts, 1):
        extra = {"ChecksumCRC64NVME": crc64nvme(data)} if create.get("ChecksumAlgorithm") == "CRC64NVME" else {}
        if create.get("ChecksumAlgorithm") == "CRC32":
            extra = {"ChecksumAlgorithm": "CRC32"}
        res = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=n, Body=data, **extra)
        done.append({"PartNumber": n, "ETag": res["ETag"],
                     **{k: v for k, v in res.items() if k.startswith("Checksum") and k != "ChecksumType"}})
    return up, done


def test_full_object_checksum_of_multipart_uploads(s3, bucket):
    parts = [bytes([i]) * (5 * MIB) for i in (1, 2)] + [b"tail" * 1000]
    whole = b"".join(parts)
    up, done = _upload(s3, bucket, "full32", parts, ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="full32", UploadId=up, MultipartUpload={"Parts": done},
                                     ChecksumCRC32=b64crc32(b"not the body"), ChecksumType="FULL_OBJECT")
    assert error_of(e) == (400, "BadDigest")
    res = s3.complete_multipart_upload(Bucket=bucket, Key="full32", UploadId=up, MultipartUpload={"Parts": done},
                                       ChecksumCRC32=b64crc32(whole), ChecksumType="FULL_OBJECT")
    assert (res["ChecksumCRC32"], res["ChecksumType"]) == (b64crc32(whole), "FULL_OBJECT")
    head = s3.head_object(Bucket=bucket, Key="full32", ChecksumMode="ENABLED")
    assert (head["ChecksumCRC32"], head["ChecksumType"]) == (b64crc32(whole), "FULL_OBJECT")
    # CRC64NVME: FULL_OBJECT is its default and only type
    small = [bytes(range(256)) * 20480, b"xyz" * 100]   # 5 MiB + 300 bytes
    up, done = _upload(s3, bucket, "full64", small, ChecksumAlgorithm="CRC64NVME")
    res = s3.complete_multipart_upload(Bucket=bucket, Key="full64", UploadId=up, MultipartUpload={"Parts": done})
    assert (res["ChecksumCRC64NVME"], res["ChecksumType"]) == (crc64nvme(b"".join(small)), "FULL_OBJECT")
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket=bucket, Key="x", ChecksumAlgorithm="CRC64NVME", ChecksumType="COMPOSITE")
    assert error_of(e) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(Bucket=bucket, Key="x", ChecksumAlgorithm="SHA1", ChecksumType="FULL_OBJECT")
    assert error_of(e) == (400, "InvalidRequest")
    created = s3.create_multipart_upload(Bucket=bucket, Key="x", ChecksumAlgorithm="CRC32C", ChecksumType="FULL_OBJECT")
    assert (created["ChecksumAlgorithm"], created["ChecksumType"]) == ("CRC32C", "FULL_OBJECT")


def test_get_object_attributes_every_field_and_part_pages(s3, bucket):
    parts = [b"a" * (5 * MIB), b"b" * (5 * MIB), b"c" * 1000]
    up, done = _upload(s3, bucket, "mp", parts, ChecksumAlgorithm="CRC32")
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": done})
    fields = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]
    attrs = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=fields, MaxParts=2)
    head = s3.head_object(Bucket=bucket, Key="mp")
    assert f'"{attrs["ETag"]}"' == head["ETag"] and head["ETag"].endswith('-3"')
    assert attrs["ObjectSize"] == 10 * MIB + 1000 and attrs["StorageClass"] == "STANDARD"
    assert attrs["Checksum"]["ChecksumType"] == "COMPOSITE" and attrs["Checksum"]["ChecksumCRC32"].endswith("-3")
    page = attrs["ObjectParts"]
    assert (page["TotalPartsCount"], page["MaxParts"], page["IsTruncated"], page["NextPartNumberMarker"]) == (3, 2, True, 2)
    assert [(p["PartNumber"], p["Size"], p["ChecksumCRC32"]) for p in page["Parts"]] == [
        (1, 5 * MIB, b64crc32(parts[0])), (2, 5 * MIB, b64crc32(parts[1]))]
    rest = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=2,
                                    PartNumberMarker=2)["ObjectParts"]
    assert rest["IsTruncated"] is False and rest["PartNumberMarker"] == 2
    assert [(p["PartNumber"], p["Size"]) for p in rest["Parts"]] == [(3, 1000)]
    value = base64.b64encode(crc32c(b"one").to_bytes(4, "big")).decode()
    single = s3.put_object(Bucket=bucket, Key="one", Body=b"one", ChecksumCRC32C=value)
    attrs = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=fields)
    assert "ObjectParts" not in attrs and attrs["ObjectSize"] == 3
    assert attrs["Checksum"] == {"ChecksumCRC32C": single["ChecksumCRC32C"], "ChecksumType": "FULL_OBJECT"}
    assert single["ChecksumCRC32C"] == value
    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=["Bogus"])
    assert error_of(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=5000)
    assert error_of(e) == (400, "InvalidArgument")
