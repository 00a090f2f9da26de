"""Conditional writes: If-None-Match: * and If-Match on PutObject and CompleteMultipartUpload,
with S3's statuses, and atomic against concurrent writers (exactly one of many wins)."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

MIB = 1024 * 1024


def error(call):
    with pytest.raises(ClientError) as e:
        call()
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def test_put_if_none_match_and_if_match(s3, bucket):
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"one", IfNoneMatch="*")["ETag"]
    assert error(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfNoneMatch="*")) == \
        (412, "PreconditionFailed")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"one"
    assert error(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfMatch='"0123"')) == \
        (412, "PreconditionFailed")
    etag2 = s3.put_object(Bucket=bucket, Key="k", Body=b"two", IfMatch=etag)["ETag"]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"two"
    assert error(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"three", IfMatch=etag)) == \
        (412, "PreconditionFailed")
    assert error(lambda: s3.put_object(Bucket=bucket, Key="absent", Body=b"x", IfMatch=etag2)) == (404, "NoSuchKey")
    # a deleted key (even behind a delete marker) may be created again with If-None-Match
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.delete_object(Bucket=bucket, Key="k")
    s3.put_object(Bucket=bucket, Key="k", Body=b"again", IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"again"
    # large bodies (own files) refused at the commit leave nothing behind
    assert error(lambda: s3.put_object(Bucket=bucket, Key="k", Body=os.urandom(MIB), IfNoneMatch="*")) == \
        (412, "PreconditionFailed")


@pytest.mark.parametrize("size", [100, 300 * 1024])
def test_concurrent_if_none_match_puts_have_one_winner(gateway, s3, bucket, size):
    bodies = [os.urandom(size) for _ in range(24)]

    def put(i):
        try:
            s3.put_object(Bucket=bucket, Key="commit-marker", Body=bodies[i], IfNoneMatch="*")
            return i
        except ClientError as exc:
            return (exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"])

    with ThreadPoolExecutor(24) as pool:
        outcomes = list(pool.map(put, range(24)))
    winners = [o for o in outcomes if isinstance(o, int)]
    assert len(winners) == 1, outcomes
    assert all(o == (412, "PreconditionFailed") for o in outcomes if not isinstance(o, int))
    assert s3.get_object(Bucket=bucket, Key="commit-marker")["Body"].read() == bodies[winners[0]]
    versions = s3.list_object_versions(Bucket=bucket, Prefix="commit-marker")
    assert len(versions["Versions"]) == 1


def _upload(s3, bucket, key, data):
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=data)["ETag"]
    return up, {"Parts": [{"PartNumber": 1, "ETag": etag}]}


def test_complete_multipart_conditions(s3, bucket):
    up, parts = _upload(s3, bucket, "mp", b"first")
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload=parts, IfNoneMatch="*")
    up2, parts2 = _upload(s3, bucket, "mp", b"second")
    assert error(lambda: s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up2, MultipartUpload=parts2,
                                                      IfNoneMatch="*")) == (412, "PreconditionFailed")
    assert error(lambda: s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up2, MultipartUpload=parts2,
                                                      IfMatch='"nope"')) == (412, "PreconditionFailed")
    # the refused upload is still there, and completes with the right ETag
    assert [p["PartNumber"] for p in s3.list_parts(Bucket=bucket, Key="mp", UploadId=up2)["Parts"]] == [1]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up2, MultipartUpload=parts2, IfMatch=done["ETag"])
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"second"


def test_concurrent_conditional_completes_have_one_winner(s3, bucket):
    uploads = [_upload(s3, bucket, "mp-race", f"body {i}".encode()) for i in range(8)]

    def complete(i):
        up, parts = uploads[i]
        try:
            s3.complete_multipart_upload(Bucket=bucket, Key="mp-race", UploadId=up, MultipartUpload=parts,
                                         IfNoneMatch="*")
            return i
        except ClientError as exc:
            return exc.response["Error"]["Code"]

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(complete, range(8)))
    winners = [o for o in outcomes if isinstance(o, int)]
    assert len(winners) == 1 and outcomes.count("PreconditionFailed") == 7, outcomes
    assert s3.get_object(Bucket=bucket, Key="mp-race")["Body"].read() == f"body {winners[0]}".encode()
