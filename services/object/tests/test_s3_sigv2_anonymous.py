"""Signature Version 2 (header and presigned query), request dates, presigned expiry bounds,
unicode metadata and unsigned requests, with botocore's own signers and raw HTTP.

What S3 answers is the reference: 403 AccessDenied / SignatureDoesNotMatch for a bad or
expired signature, 400 InvalidArgument for an unparseable SigV2 header.
"""
from __future__ import annotations

import time
from email.header import decode_header
from email.utils import formatdate

import pytest
import requests
from botocore.auth import HmacV1Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

import boto3
from services.object.tests import s3raw
from services.object.tests.gatewayproc import ACCESS, SECRET, USER_ACCESS, USER_SECRET


def xml_code(text: str) -> str:
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""


def v2_client(gateway, access=ACCESS, secret=SECRET):
    return boto3.client("s3", endpoint_url=gateway.endpoint, aws_access_key_id=access,
                        aws_secret_access_key=secret, region_name="us-east-1",
                        config=Config(signature_version="s3", s3={"addressing_style": "path"},
                                      retries={"max_attempts": 1}))


class _DatedV1Auth(HmacV1Auth):
    def __init__(self, credentials, date: str | None):
        super().__init__(credentials)
        self.date = date

    def _get_date(self):
        return self.date or super()._get_date()


def v2_headers(method: str, url: str, headers: dict | None = None, access=ACCESS, secret=SECRET,
               date: str | None = None, auth_path: str | None = None) -> dict:
    """Headers signed by botocore's SigV2 signer (``date``: the Date it signs and sends;
    ``auth_path``: the /bucket/key it signs for a virtual-host URL)."""
    req = AWSRequest(method=method, url=url, headers=dict(headers or {}), auth_path=auth_path)
    _DatedV1Auth(Credentials(access, secret), date).add_auth(req)
    return dict(req.headers.items())


def with_unicode_metadata(client, value: str):
    """Send x-amz-meta-meta1 with non-ASCII characters (botocore refuses them as Metadata)."""
    def add(params, **_):
        params["headers"]["x-amz-meta-meta1"] = value
    client.meta.events.register("before-call.s3.PutObject", add)
    return client


def decoded(value: str) -> str:
    text, charset = decode_header(value)[0]
    return text.decode(charset) if isinstance(text, bytes) else text


def test_sigv2_client_round_trip_with_unicode_metadata(gateway, bucket):
    s3 = with_unicode_metadata(v2_client(gateway), "Hello World\xe9")
    s3.put_object(Bucket=bucket, Key="dir/ünï cödé.txt", Body=b"v2 body")
    got = s3.get_object(Bucket=bucket, Key="dir/ünï cödé.txt")
    assert got["Body"].read() == b"v2 body"
    assert decoded(got["Metadata"]["meta1"]) == "Hello World\xe9"
    # signed sub-resources and query parameters
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="dir/")["Contents"]] == ["dir/ünï cödé.txt"]
    assert s3.get_bucket_acl(Bucket=bucket)["Owner"]["ID"] == "admin"
    got = s3.get_object(Bucket=bucket, Key="dir/ünï cödé.txt", ResponseContentType="text/x-v2")
    assert got["ContentType"] == "text/x-v2"
    with pytest.raises(ClientError) as e:
        v2_client(gateway, ACCESS, "wrong").get_object(Bucket=bucket, Key="dir/ünï cödé.txt")
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError) as e:
        v2_client(gateway, "NOSUCHKEY", "x").list_objects(Bucket=bucket)
    assert e.value.response["Error"]["Code"] == "InvalidAccessKeyId"


def test_sigv4_unicode_metadata(gateway, bucket):
    s3 = with_unicode_metadata(gateway.client(), "caf\xe9")
    s3.put_object(Bucket=bucket, Key="u", Body=b"x")
    meta = s3.head_object(Bucket=bucket, Key="u")["Metadata"]["meta1"]
    assert meta == "=?UTF-8?B?Y2Fmw6k=?="  # S3 answers non-ASCII metadata RFC 2047-encoded
    assert decoded(meta) == "caf\xe9"


def test_sigv2_presigned_urls(gateway, bucket):
    s3 = v2_client(gateway)
    put = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pre v2"}, ExpiresIn=300)
    assert "AWSAccessKeyId=" in put and "Signature=" in put and "Expires=" in put
    r = requests.put(put, data=b"presigned v2")
    assert r.status_code == 200, r.text
    get = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre v2"}, ExpiresIn=300)
    r = requests.get(get)
    assert r.status_code == 200 and r.content == b"presigned v2"
    r = requests.get(get.replace("Signature=", "Signature=AA"))
    assert r.status_code == 403 and xml_code(r.text) == "SignatureDoesNotMatch"
    expired = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre v2"}, ExpiresIn=-10)
    r = requests.get(expired)
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"
    assert "Request has expired" in r.text


def test_sigv2_header_errors_on_the_wire(gateway, bucket):
    url = f"{gateway.endpoint}/{bucket}/raw"
    r = requests.put(url, data=b"x", headers={"Authorization": "AWS HAHAHA", "Date": formatdate(usegmt=True)})
    assert r.status_code == 400 and xml_code(r.text) == "InvalidArgument"
    r = requests.put(url, data=b"x", headers={"Authorization": "AWS AKIAIGR7ZNNBHC5BKSUB:FWeDfwojDSdS2Ztmpfeubhd9isU=",
                                              "Date": formatdate(usegmt=True)})
    assert r.status_code == 403 and xml_code(r.text) == "InvalidAccessKeyId"
    headers = v2_headers("PUT", url)
    del headers["Date"]
    r = requests.put(url, data=b"x", headers=headers)
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"
    # an x-amz-date sent empty (and signed so) does not fall back to Date
    r = requests.put(url, data=b"x", headers=v2_headers("PUT", url, {"X-Amz-Date": ""}))
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied", r.text
    stale = formatdate(time.time() - 3600, usegmt=True)
    r = requests.put(url, data=b"x", headers=v2_headers("PUT", url, date=stale))
    assert r.status_code == 403 and xml_code(r.text) == "RequestTimeTooSkewed"


def test_sigv2_virtual_host_style(gateway, s3, bucket):
    s3.put_object(Bucket=bucket, Key="vh/v2.txt", Body=b"virtual v2")
    host = f"{bucket}.localhost:{gateway.port}"
    headers = v2_headers("GET", f"http://{host}/vh/v2.txt", auth_path=f"/{bucket}/vh/v2.txt")
    r = requests.get(f"{gateway.endpoint}/vh/v2.txt", headers={**headers, "Host": host})
    assert r.status_code == 200 and r.content == b"virtual v2"
    headers = v2_headers("GET", f"http://{host}/?acl", auth_path=f"/{bucket}/")
    r = requests.get(f"{gateway.endpoint}/?acl", headers={**headers, "Host": host})
    assert r.status_code == 200 and "<AccessControlPolicy" in r.text


def test_date_and_x_amz_date_together(gateway, bucket):
    url = f"{gateway.endpoint}/{bucket}/dates"
    now = formatdate(usegmt=True)
    # SigV2: x-amz-date is signed among the x-amz headers and takes Date's place
    r = requests.put(url, data=b"d", headers=v2_headers("PUT", url, {"X-Amz-Date": now, "Date": now}))
    assert r.status_code == 200, r.text
    r = requests.put(url, data=b"d", headers=v2_headers("PUT", url, {"X-Amz-Date": now}))
    assert r.status_code == 200, r.text
    # SigV4: a Date header nobody can parse does not matter when X-Amz-Date is there
    headers = s3raw.sign("PUT", url, ACCESS, SECRET)
    headers["Date"] = "Bad Date"
    assert requests.put(url, data=b"d", headers=headers).status_code == 200
    for bad in ("19500707T215304Z", "Bad Date", ""):
        headers = s3raw.sign("PUT", url, ACCESS, SECRET)
        headers["X-Amz-Date"] = bad
        r = requests.put(url, data=b"d", headers=headers)
        assert r.status_code == 403 and xml_code(r.text) in ("AccessDenied", "SignatureDoesNotMatch"), (bad, r.text)


@pytest.mark.parametrize("expires", [0, -7, 604801])
def test_presigned_expires_out_of_range_is_403(gateway, s3, bucket, expires):
    s3.put_object(Bucket=bucket, Key="exp", Body=b"x", ACL="public-read")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "exp"}, ExpiresIn=100)
    url = url.replace("X-Amz-Expires=100", f"X-Amz-Expires={expires}")
    r = requests.get(url)
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied", r.text
    ok = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "exp"}, ExpiresIn=604800)
    assert requests.get(ok).status_code == 200


def test_unsigned_requests(gateway, s3, bucket):
    s3.put_object(Bucket=bucket, Key="private", Body=b"p")
    r = requests.get(f"{gateway.endpoint}/{bucket}/private")
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"
    r = requests.get(f"{gateway.endpoint}/{bucket}/private", headers={"Authorization": ""})
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"
    r = requests.get(f"{gateway.endpoint}/{bucket}/missing")
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"  # no listing right: no 404 hint
    r = requests.get(f"{gateway.endpoint}/")
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"
    r = requests.put(f"{gateway.endpoint}/anon-made-bucket")
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"
    r = requests.put(f"{gateway.endpoint}/{bucket}/anon", data=b"x")
    assert r.status_code == 403 and xml_code(r.text) == "AccessDenied"
    # a user key still sees only its own buckets
    alice = gateway.client(USER_ACCESS, USER_SECRET)
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="private")
    assert e.value.response["Error"]["Code"] == "AccessDenied"


@pytest.mark.parametrize("version", ["s3", "s3v4"])
def test_presigned_put_with_acl(gateway, bucket, version):
    """x-amz-* parameters of a presigned URL (here x-amz-acl) apply as headers would."""
    s3 = v2_client(gateway) if version == "s3" else gateway.client()
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": f"acl-{version}",
                                                          "ACL": "public-read"}, ExpiresIn=300)
    # SigV2 URLs carry it as a query parameter; SigV4 URLs sign it as a header to send
    headers = {} if version == "s3" else {"x-amz-acl": "public-read"}
    assert ("x-amz-acl=public-read" in url) == (version == "s3")
    r = requests.put(url, data=b"public by URL", headers=headers)
    assert r.status_code == 200, r.text
    assert requests.get(f"{gateway.endpoint}/{bucket}/acl-{version}").content == b"public by URL"
