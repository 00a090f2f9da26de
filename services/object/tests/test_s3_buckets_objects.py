"""Bucket and object operations through boto3 against a real gateway process."""
from __future__ import annotations

import base64
import datetime
import hashlib
import os
import uuid

import pytest
from botocore.exceptions import ClientError

from services.object.tests.gatewayproc import USER_ACCESS, USER_SECRET


def code_of(exc_info) -> str:
    return exc_info.value.response["Error"]["Code"]


def test_bucket_lifecycle(s3):
    name = f"life-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    s3.head_bucket(Bucket=name)
    assert s3.get_bucket_location(Bucket=name).get("LocationConstraint") in (None, "")
    s3.create_bucket(Bucket=name)  # the owner again, in us-east-1: 200, as S3 answers there
    s3.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=name)
    assert code_of(e) == "BucketNotEmpty"
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        s3.head_bucket(Bucket=name)
    assert e.value.response["Error"]["Code"] in ("404", "NoSuchBucket")
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket=name)
    assert code_of(e) == "NoSuchBucket"


@pytest.mark.parametrize("name", ["ab", "UPPER", "has_underscore", "-lead", "trail-", "a..b", "192.168.1.1",
                                  "x" * 64])
def test_bad_bucket_names(s3, name):
    with pytest.raises(ClientError) as e:
        s3.create_bucket(Bucket=name)
    assert code_of(e) == "InvalidBucketName"


def test_other_users_bucket_is_denied(gateway, bucket):
    alice = gateway.client(USER_ACCESS, USER_SECRET)
    with pytest.raises(ClientError) as e:
        alice.list_objects_v2(Bucket=bucket)
    assert code_of(e) == "AccessDenied"
    own = f"alice-{uuid.uuid4().hex[:8]}"
    alice.create_bucket(Bucket=own)
    names = [b["Name"] for b in alice.list_buckets()["Buckets"]]
    assert own in names and bucket not in names


def test_put_get_head_delete_with_metadata(s3, bucket):
    body = os.urandom(1000)
    put = s3.put_object(Bucket=bucket, Key="dir/obj.bin", Body=body, Metadata={"job": "llama", "step": "42"},
                        ContentType="application/x-test", ContentEncoding="gzip",
                        ContentDisposition='attachment; filename="x.bin"', CacheControl="no-cache")
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="dir/obj.bin")
    assert got["Body"].read() == body
    assert got["Metadata"] == {"job": "llama", "step": "42"}
    assert got["ContentType"] == "application/x-test"
    assert got["ContentEncoding"] == "gzip"
    assert got["ContentDisposition"] == 'attachment; filename="x.bin"'
    assert got["CacheControl"] == "no-cache"
    head = s3.head_object(Bucket=bucket, Key="dir/obj.bin")
    assert head["ContentLength"] == 1000 and head["ETag"] == put["ETag"]
    s3.delete_object(Bucket=bucket, Key="dir/obj.bin")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="dir/obj.bin")
    assert code_of(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="dir/obj.bin")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_overwrite_large_and_small(s3, bucket):
    for size in (10, 300_000, 5, 2_000_000):
        data = os.urandom(size)
        s3.put_object(Bucket=bucket, Key="same", Body=data)
        assert s3.get_object(Bucket=bucket, Key="same")["Body"].read() == data
    keys = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(k["Key"], k["Size"]) for k in keys] == [("same", 2_000_000)]


def test_ranges(s3, bucket):
    data = bytes(range(256)) * 1000
    for key, payload in (("small", data[:1000]), ("large", data)):
        s3.put_object(Bucket=bucket, Key=key, Body=payload)
        r = s3.get_object(Bucket=bucket, Key=key, Range="bytes=10-19")
        assert r["Body"].read() == payload[10:20] and r["ContentRange"] == f"bytes 10-19/{len(payload)}"
        assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=-5")["Body"].read() == payload[-5:]
        assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=990-")["Body"].read() == payload[990:]
        assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-99999999999")["Body"].read() == payload
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket=bucket, Key=key, Range="bytes=99999999999-")
        assert code_of(e) == "InvalidRange"
        # malformed or negative ranges are ignored (whole object), as HTTP requires
        assert s3.get_object(Bucket=bucket, Key=key, Range="bytes=-5-3")["Body"].read() == payload


def test_conditional_get(s3, bucket):
    etag = s3.put_object(Bucket=bucket, Key="c", Body=b"cond")["ETag"]
    past = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    future = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)["Body"].read() == b"cond"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfMatch='"0000"')
    assert code_of(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfNoneMatch=etag)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=future)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    assert s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=past)["Body"].read() == b"cond"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", IfUnmodifiedSince=past)
    assert code_of(e) == "PreconditionFailed"


def test_content_md5_and_checksums(s3, bucket):
    data = b"integrity" * 100
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    s3.put_object(Bucket=bucket, Key="m", Body=data, ContentMD5=md5)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=data, ContentMD5=base64.b64encode(b"0" * 16).decode())
    assert code_of(e) == "BadDigest"
    for algo in ("CRC32", "SHA1", "SHA256"):  # CRC32C: botocore needs awscrt; see test_s3_wire.py
        for size in (len(data), 200_000):
            payload = (data * 300)[:size]
            r = s3.put_object(Bucket=bucket, Key=f"ck-{algo}-{size}", Body=payload, ChecksumAlgorithm=algo)
            assert r[f"Checksum{algo}"]
            got = s3.get_object(Bucket=bucket, Key=f"ck-{algo}-{size}", ChecksumMode="ENABLED")
            assert got[f"Checksum{algo}"] == r[f"Checksum{algo}"]
            assert got["Body"].read() == payload
    sha = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="badsha", Body=data, ChecksumSHA256=sha)
    assert code_of(e) in ("BadDigest", "InvalidRequest")
    assert "badsha" not in [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]


def test_copy_object(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"copy me", Metadata={"a": "1"}, ContentType="text/plain",
                  Tagging="t=1")
    big = os.urandom(400_000)
    s3.put_object(Bucket=bucket, Key="bigsrc", Body=big)
    r = s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert r["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(b"copy me").hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="dst")
    assert got["Body"].read() == b"copy me" and got["Metadata"] == {"a": "1"} and got["ContentType"] == "text/plain"
    assert s3.get_object_tagging(Bucket=bucket, Key="dst")["TagSet"] == [{"Key": "t", "Value": "1"}]
    s3.copy_object(Bucket=bucket, Key="dst2", CopySource=f"{bucket}/src", MetadataDirective="REPLACE",
                   Metadata={"b": "2"}, ContentType="application/json")
    got = s3.get_object(Bucket=bucket, Key="dst2")
    assert got["Metadata"] == {"b": "2"} and got["ContentType"] == "application/json"
    s3.copy_object(Bucket=bucket, Key="bigdst", CopySource=f"{bucket}/bigsrc")
    assert s3.get_object(Bucket=bucket, Key="bigdst")["Body"].read() == big
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="dst3", CopySource=f"{bucket}/src", CopySourceIfMatch='"nope"')
    assert code_of(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="dst3", CopySource=f"{bucket}/src",
                       CopySourceIfUnmodifiedSince=datetime.datetime(2000, 1, 1))
    assert code_of(e) == "PreconditionFailed"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="src", CopySource=f"{bucket}/src")
    assert code_of(e) == "InvalidRequest"
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="dst3", CopySource=f"{bucket}/missing")
    assert code_of(e) == "NoSuchKey"


def test_tagging(s3, bucket):
    s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="a=1&b=two")
    assert s3.head_object(Bucket=bucket, Key="t")["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "2"
    tags = {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]}
    assert tags == {"a": "1", "b": "two"}
    s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": [{"Key": "z", "Value": "9"}]})
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == [{"Key": "z", "Value": "9"}]
    s3.delete_object_tagging(Bucket=bucket, Key="t")
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
    assert s3.get_object(Bucket=bucket, Key="t")["Body"].read() == b"x"


def test_multi_delete(s3, bucket):
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"md/{i}", Body=b"x")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"md/{i}"} for i in range(3)]
                                                 + [{"Key": "md/never"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["md/0", "md/1", "md/2", "md/never"]
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="md/")["Contents"]]
    assert left == ["md/3", "md/4"]
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "md/3"}], "Quiet": True})
    assert not r.get("Deleted")


def test_listings(s3, bucket):
    keys = sorted([f"a/{i:03d}" for i in range(25)] + [f"b/x/{i}" for i in range(3)] + ["c", "d e+f", "zz/ü"])
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    # v2 pagination visits every key once, in order, across index shards
    seen, token = [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = s3.list_objects_v2(Bucket=bucket, MaxKeys=7, **kw)
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert seen == keys
    # v1 marker pagination
    seen, marker = [], ""
    while True:
        page = s3.list_objects(Bucket=bucket, MaxKeys=6, Marker=marker)
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        marker = page["NextMarker"]
    assert seen == keys
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["a/", "b/", "zz/"]
    assert [o["Key"] for o in r["Contents"]] == ["c", "d e+f"]
    r = s3.list_objects_v2(Bucket=bucket, Delimiter="/", MaxKeys=2)
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == ["a/", "b/"] and r["IsTruncated"]
    r2 = s3.list_objects_v2(Bucket=bucket, Delimiter="/", ContinuationToken=r["NextContinuationToken"])
    assert [o["Key"] for o in r2["Contents"]] == ["c", "d e+f"] and r2["CommonPrefixes"] == [{"Prefix": "zz/"}]
    r = s3.list_objects_v2(Bucket=bucket, Prefix="b/", Delimiter="/")
    assert r["CommonPrefixes"] == [{"Prefix": "b/x/"}]
    r = s3.list_objects_v2(Bucket=bucket, StartAfter="a/020", Prefix="a/")
    assert [o["Key"] for o in r["Contents"]] == [f"a/{i:03d}" for i in range(21, 25)]
    # asked for explicitly, encoding-type=url comes back encoded (boto3 decodes only its own request)
    r = s3.list_objects(Bucket=bucket, Prefix="d", EncodingType="url")
    assert [o["Key"] for o in r["Contents"]] == ["d%20e%2Bf"]
    assert s3.list_objects_v2(Bucket=bucket, Prefix="zz/")["Contents"][0]["Key"] == "zz/ü"
    assert s3.list_objects_v2(Bucket=bucket, MaxKeys=0)["KeyCount"] == 0


def test_versioning(s3, bucket):
    s3.put_object(Bucket=bucket, Key="v", Body=b"null-version")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    v1 = s3.put_object(Bucket=bucket, Key="v", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="v", Body=b"two")["VersionId"]
    assert v1 != v2 and "null" not in (v1, v2)
    assert s3.get_object(Bucket=bucket, Key="v")["Body"].read() == b"two"
    assert s3.get_object(Bucket=bucket, Key="v", VersionId=v1)["Body"].read() == b"one"
    assert s3.get_object(Bucket=bucket, Key="v", VersionId="null")["Body"].read() == b"null-version"
    d = s3.delete_object(Bucket=bucket, Key="v")
    assert d["DeleteMarker"] is True
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="v")
    assert code_of(e) == "NoSuchKey"
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    vers = s3.list_object_versions(Bucket=bucket)
    assert [(v["VersionId"], v["IsLatest"]) for v in vers["Versions"]] == [(v2, False), (v1, False), ("null", False)]
    assert vers["DeleteMarkers"][0]["VersionId"] == d["VersionId"] and vers["DeleteMarkers"][0]["IsLatest"]
    page = s3.list_object_versions(Bucket=bucket, MaxKeys=2)
    assert page["IsTruncated"]
    rest = s3.list_object_versions(Bucket=bucket, KeyMarker=page["NextKeyMarker"],
                                   VersionIdMarker=page["NextVersionIdMarker"])
    assert len(rest["Versions"]) + len(page.get("Versions", [])) + len(page.get("DeleteMarkers", [])) == 4
    # removing the delete marker brings v2 back
    s3.delete_object(Bucket=bucket, Key="v", VersionId=d["VersionId"])
    assert s3.get_object(Bucket=bucket, Key="v")["Body"].read() == b"two"
    s3.delete_object(Bucket=bucket, Key="v", VersionId=v2)
    assert s3.get_object(Bucket=bucket, Key="v")["Body"].read() == b"one"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="v", VersionId="1234567890123456789.abcdef12")
    assert code_of(e) == "NoSuchVersion"
    # suspended: new writes get the null version, old versions stay
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert "VersionId" not in s3.put_object(Bucket=bucket, Key="v", Body=b"susp")  # as S3: the null version unnamed
    ids = [v["VersionId"] for v in s3.list_object_versions(Bucket=bucket)["Versions"]]
    assert ids == ["null", v1]
    # a bucket with versions or delete markers is not empty
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert code_of(e) == "BucketNotEmpty"
