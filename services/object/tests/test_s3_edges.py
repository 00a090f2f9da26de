"""S3 edges clients meet: multipart (repeated Complete, GET/HEAD ?partNumber, duplicate parts,
copy ranges), versioning (Suspended from the start, delete-marker headers, version listings
whose marker version is gone), ListBuckets pages, bucket tagging, lifecycle rule ids,
chunked uploads without Content-Length, Content-Encoding kept, repeated CreateBucket, and
the answers S3 gives for settings this gateway does not configure."""
from __future__ import annotations

import hashlib
import os
import uuid

import pytest
import requests
from botocore.exceptions import ClientError

from services.object.tests import s3raw
from services.object.tests.gatewayproc import ACCESS, SECRET, USER_ACCESS, USER_SECRET

MIB = 1024 * 1024


def error(call):
    with pytest.raises(ClientError) as e:
        call()
    r = e.value.response
    return r["ResponseMetadata"]["HTTPStatusCode"], r["Error"]["Code"]


def xml_code(text: str) -> str:
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""


def _two_part_upload(s3, bucket, key):
    p1, p2 = os.urandom(5 * MIB), os.urandom(1234)
    up = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=p1)["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=2, Body=p2)["ETag"]
    return up, [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}], p1, p2


def test_multipart_complete_twice_parts_and_duplicates(s3, bucket):
    up, parts, p1, p2 = _two_part_upload(s3, bucket, "mp")
    dup = {"Parts": [parts[0], parts[0], parts[1]]}
    assert error(lambda: s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload=dup)) == \
        (400, "InvalidPartOrder")
    first = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    again = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    assert again["ETag"] == first["ETag"] and again["Key"] == "mp"
    # a different part list for the completed upload is no longer an upload
    assert error(lambda: s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up,
                                                      MultipartUpload={"Parts": parts[:1]})) == (404, "NoSuchUpload")
    # GET / HEAD ?partNumber=N
    got = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert got["Body"].read() == p2 and got["PartsCount"] == 2
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == f"bytes {len(p1)}-{len(p1) + len(p2) - 1}/{len(p1) + len(p2)}"
    head = s3.head_object(Bucket=bucket, Key="mp", PartNumber=1)
    assert head["ContentLength"] == len(p1) and head["PartsCount"] == 2
    assert error(lambda: s3.get_object(Bucket=bucket, Key="mp", PartNumber=3)) == (416, "InvalidPartNumber")
    assert error(lambda: s3.get_object(Bucket=bucket, Key="mp", PartNumber=0))[1] in ("InvalidArgument",
                                                                                        "ParamValidationError")
    assert error(lambda: s3.get_object(Bucket=bucket, Key="mp", PartNumber=1, Range="bytes=0-1")) == \
        (400, "InvalidRequest")
    # a single-part object is its own part 1
    s3.put_object(Bucket=bucket, Key="single", Body=b"whole")
    assert s3.get_object(Bucket=bucket, Key="single", PartNumber=1)["Body"].read() == b"whole"
    assert error(lambda: s3.get_object(Bucket=bucket, Key="single", PartNumber=2)) == (416, "InvalidPartNumber")


def test_upload_part_copy_ranges(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"0123456789")
    up = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    src = {"Bucket": bucket, "Key": "src"}
    for rng in ("bytes=-5", "bytes=5-", "bytes=5", "bytes=6-2", "5-6", "bytes=0-1,3-4"):
        assert error(lambda: s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=1, CopySource=src,
                                                 CopySourceRange=rng)) == (400, "InvalidArgument"), rng
    assert error(lambda: s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=1, CopySource=src,
                                             CopySourceRange="bytes=0-10")) == (416, "InvalidRange")
    etag = s3.upload_part_copy(Bucket=bucket, Key="dst", UploadId=up, PartNumber=1, CopySource=src,
                               CopySourceRange="bytes=2-9")["CopyPartResult"]["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="dst", UploadId=up,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"23456789"


def test_versioning_suspended_from_the_start_and_delete_marker_headers(s3, bucket):
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Suspended"
    # writes answer without x-amz-version-id (S3's PutObject reference shows none for a suspended
    # bucket); reads and listings name the null version
    for body in (b"1", b"2"):
        put = s3.put_object(Bucket=bucket, Key="s", Body=body)
        assert "x-amz-version-id" not in put["ResponseMetadata"]["HTTPHeaders"] and "VersionId" not in put
    assert [v["VersionId"] for v in s3.list_object_versions(Bucket=bucket)["Versions"]] == ["null"]
    assert s3.head_object(Bucket=bucket, Key="s")["VersionId"] == "null"
    assert s3.get_object(Bucket=bucket, Key="s", VersionId="null")["Body"].read() == b"2"
    copied = s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "s"})
    assert "VersionId" not in copied
    up = s3.create_multipart_upload(Bucket=bucket, Key="m")["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key="m", UploadId=up, PartNumber=1, Body=b"m")["ETag"]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="m", UploadId=up,
                                        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert "VersionId" not in done and s3.head_object(Bucket=bucket, Key="m")["VersionId"] == "null"
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="v", Body=b"x")
    deleted = s3.delete_object(Bucket=bucket, Key="v")
    assert deleted["DeleteMarker"] is True and deleted["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    marker = deleted["VersionId"]
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="v")
        headers = e.value.response["ResponseMetadata"]["HTTPHeaders"]
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        assert headers["x-amz-delete-marker"] == "true" and headers["x-amz-version-id"] == marker
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="v", VersionId=marker)
        headers = e.value.response["ResponseMetadata"]["HTTPHeaders"]
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 405
        assert headers["x-amz-delete-marker"] == "true" and headers["last-modified"]
    removed = s3.delete_object(Bucket=bucket, Key="v", VersionId=marker)
    assert removed["DeleteMarker"] is True and removed["VersionId"] == marker
    assert s3.get_object(Bucket=bucket, Key="v")["Body"].read() == b"x"


def test_list_versions_resumes_after_a_deleted_marker_version(s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for key in ("a", "b", "c"):
        for i in range(3):
            s3.put_object(Bucket=bucket, Key=key, Body=f"{key}{i}".encode())
    seen = []
    page = s3.list_object_versions(Bucket=bucket, MaxKeys=2)
    while True:
        listed = [(v["Key"], v["VersionId"]) for v in page.get("Versions", [])]
        seen += listed
        for key, vid in listed:  # a cleanup script deletes what it listed before asking for more
            s3.delete_object(Bucket=bucket, Key=key, VersionId=vid)
        if not page["IsTruncated"]:
            break
        page = s3.list_object_versions(Bucket=bucket, MaxKeys=2, KeyMarker=page["NextKeyMarker"],
                                       VersionIdMarker=page["NextVersionIdMarker"])
    assert len(seen) == 9 and len(set(seen)) == 9
    assert "Versions" not in s3.list_object_versions(Bucket=bucket)
    # a version id marker that never existed resumes in its place too
    s3.put_object(Bucket=bucket, Key="d", Body=b"d")
    page = s3.list_object_versions(Bucket=bucket, KeyMarker="a", VersionIdMarker="0000000000000000001.abcdef12")
    assert [v["Key"] for v in page["Versions"]] == ["d"]
    assert error(lambda: s3.list_object_versions(Bucket=bucket, KeyMarker="a", VersionIdMarker="garbage")) == \
        (400, "InvalidArgument")
    assert error(lambda: s3.list_object_versions(Bucket=bucket, VersionIdMarker="null")) == (400, "InvalidArgument")


def test_list_buckets_pages_and_prefix(gateway):
    alice = gateway.client(USER_ACCESS, USER_SECRET)
    tag = uuid.uuid4().hex[:6]
    names = [f"lb-{tag}-{i}" for i in range(5)]
    for name in names:
        alice.create_bucket(Bucket=name)
    got, token = [], None
    while True:
        kwargs = {"MaxBuckets": 2, "Prefix": f"lb-{tag}-"}
        if token:
            kwargs["ContinuationToken"] = token
        page = alice.list_buckets(**kwargs)
        assert len(page["Buckets"]) <= 2 and page["Prefix"] == f"lb-{tag}-"
        got += [b["Name"] for b in page["Buckets"]]
        token = page.get("ContinuationToken")
        if not token:
            break
    assert got == names
    for bad in ("0", "10001", "x"):
        url = f"{gateway.endpoint}/?max-buckets={bad}"
        r = requests.get(url, headers=s3raw.sign("GET", url, USER_ACCESS, USER_SECRET))
        assert r.status_code == 400 and xml_code(r.text) == "InvalidArgument", r.text
    # the owner re-creating its bucket in us-east-1 gets 200 (the admin interface still says 409)
    alice.create_bucket(Bucket=names[0])
    assert error(lambda: gateway.client().create_bucket(Bucket=names[0])) == (409, "BucketAlreadyExists")


def test_bucket_tagging_and_object_tag_order(s3, bucket):
    assert error(lambda: s3.get_bucket_tagging(Bucket=bucket)) == (404, "NoSuchTagSet")
    tags = [{"Key": "zeta", "Value": "1"}, {"Key": "alpha", "Value": ""}, {"Key": "mid", "Value": "x y"}]
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags})
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == tags
    dup = {"TagSet": [{"Key": "a", "Value": "1"}, {"Key": "a", "Value": "2"}]}
    assert error(lambda: s3.put_bucket_tagging(Bucket=bucket, Tagging=dup)) == (400, "InvalidTag")
    assert error(lambda: s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "k" * 129, "Value": ""}]})) \
        == (400, "InvalidTag")
    assert s3.get_bucket_tagging(Bucket=bucket)["TagSet"] == tags
    s3.delete_bucket_tagging(Bucket=bucket)
    assert error(lambda: s3.get_bucket_tagging(Bucket=bucket)) == (404, "NoSuchTagSet")
    s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="zz=1&aa=2&mm=3")
    assert [t["Key"] for t in s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]] == ["zz", "aa", "mm"]
    assert error(lambda: s3.put_object(Bucket=bucket, Key="t2", Body=b"x", Tagging="a=1&a=2")) == (400, "InvalidTag")


def test_lifecycle_rule_ids_validated(s3, bucket):
    def rule(rid):
        return {"ID": rid, "Status": "Enabled", "Filter": {"Prefix": ""}, "Expiration": {"Days": 1}}

    assert error(lambda: s3.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": [rule("same"), rule("same")]})) == (400, "InvalidArgument")
    assert error(lambda: s3.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": [rule("x" * 256)]})) == (400, "InvalidArgument")
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [rule("x" * 255)]})
    # rules put without an ID get one, kept from then on
    unnamed = {"Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 3}}
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [unnamed, rule("mine")]})
    got = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [r["ID"] for r in got][1] == "mine" and len(got[0]["ID"]) == 48
    assert got[0]["Expiration"] == {"Days": 3} and got[0]["Filter"] == {"Prefix": "logs/"}
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"][0]["ID"] == got[0]["ID"]


def test_chunked_upload_without_content_length_and_content_encoding_kept(gateway, s3, bucket):
    data = os.urandom(200_000)
    for key, mode in (("chunked-signed", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"),
                      ("chunked-trailer", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")):
        url = f"{gateway.endpoint}/{bucket}/{key}"
        headers = s3raw.sign("PUT", url, ACCESS, SECRET, mode, {
            "Content-Encoding": "aws-chunked", "X-Amz-Decoded-Content-Length": str(len(data)),
            "Transfer-Encoding": "chunked"})
        body = s3raw.aws_chunked(data, 65536, headers, SECRET, signed=mode.endswith("PAYLOAD"))

        def gen(b=body):
            for i in range(0, len(b), 50_000):
                yield b[i:i + 50_000]

        r = requests.put(url, data=gen(), headers=headers)  # requests sends Transfer-Encoding: chunked
        assert r.status_code == 200, r.text
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data
    for encoding in ("gzip, deflate", "GZIP", "br,identity"):
        s3.put_object(Bucket=bucket, Key="enc", Body=b"x", ContentEncoding=encoding)
        assert s3.head_object(Bucket=bucket, Key="enc")["ContentEncoding"] == encoding


def test_unconfigured_settings_answer_as_s3(gateway, s3, bucket):
    s3.put_object(Bucket=bucket, Key="o", Body=b"x")
    assert error(lambda: s3.get_bucket_website(Bucket=bucket)) == (404, "NoSuchWebsiteConfiguration")
    assert error(lambda: s3.get_bucket_replication(Bucket=bucket)) == (404, "ReplicationConfigurationNotFoundError")
    assert "LoggingEnabled" not in s3.get_bucket_logging(Bucket=bucket)
    assert s3.get_bucket_request_payment(Bucket=bucket)["Payer"] == "BucketOwner"
    assert "Status" not in s3.get_bucket_accelerate_configuration(Bucket=bucket)
    s3.get_bucket_notification_configuration(Bucket=bucket)
    assert error(lambda: s3.get_object_torrent(Bucket=bucket, Key="o")) == (404, "NoSuchKey")
    url = f"{gateway.endpoint}/{bucket}?website"
    body = b"<WebsiteConfiguration/>"
    r = requests.put(url, data=body, headers=s3raw.sign("PUT", url, ACCESS, SECRET, hashlib.sha256(body).hexdigest()))
    assert r.status_code == 501 and xml_code(r.text) == "NotImplemented"


def test_list_objects_v1_returns_the_prefix_as_sent(s3, bucket):
    """boto3 asks ListObjects for url-encoded keys; S3 still returns the v1 Prefix as sent
    (clients do not decode it there), while keys, common prefixes and v2's Prefix come encoded."""
    for key in ("a b/one", "a b/two", "plain"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    for prefix in ("a b/", "\n"):
        v1 = s3.list_objects(Bucket=bucket, Prefix=prefix)
        v2 = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
        assert v1["Prefix"] == v2["Prefix"] == prefix
    v1 = s3.list_objects(Bucket=bucket, Prefix="a b/")
    assert [o["Key"] for o in v1["Contents"]] == ["a b/one", "a b/two"]
    grouped = s3.list_objects(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["a b/"]


def test_allow_unordered_listing(s3, bucket):
    """radosgw's ``allow-unordered=true``: every key, once, across pages; refused with a delimiter."""
    keys = [f"{d}/{k}" for d in ("abc", "def") for k in ("ink", "jet", "kin")] + ["ado", "zoo"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"")

    def unordered(**kwargs):
        kwargs["params"]["url"] += "&allow-unordered=true"
    s3.meta.events.register("before-call.s3.ListObjects", unordered)
    s3.meta.events.register("before-call.s3.ListObjectsV2", unordered)
    try:
        first = [o["Key"] for o in s3.list_objects(Bucket=bucket, MaxKeys=5)["Contents"]]
        rest = [o["Key"] for o in s3.list_objects(Bucket=bucket, MaxKeys=5, Marker=first[-1])["Contents"]]
        assert sorted(first + rest) == sorted(keys)
        assert len(s3.list_objects_v2(Bucket=bucket, Prefix="abc/")["Contents"]) == 3
        for call in (s3.list_objects, s3.list_objects_v2):
            assert error(lambda: call(Bucket=bucket, Delimiter="/")) == (400, "InvalidArgument")
    finally:
        s3.meta.events.unregister("before-call.s3.ListObjects", unordered)
        s3.meta.events.unregister("before-call.s3.ListObjectsV2", unordered)
