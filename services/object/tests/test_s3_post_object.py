"""POST Object (browser form uploads): SigV4 and SigV2 policies made by boto3's own
``generate_presigned_post``, conditions, success actions, anonymous forms, and the S3 error
each bad form gets (never a 5xx).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import uuid

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from services.object.tests.gatewayproc import ACCESS, SECRET


def xml_code(r: requests.Response) -> str:
    return r.text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in r.text else ""


def post(url: str, fields: dict, data: bytes = b"form bytes", filename: str = "f.txt") -> requests.Response:
    return requests.post(url, data=fields, files={"file": (filename, data)}, allow_redirects=False)


def test_sigv4_form_with_conditions(s3, bucket):
    form = s3.generate_presigned_post(
        bucket, "uploads/${filename}", Fields={"Content-Type": "text/plain", "x-amz-meta-who": "form"},
        Conditions=[["starts-with", "$key", "uploads/"], {"Content-Type": "text/plain"},
                    {"x-amz-meta-who": "form"}, ["content-length-range", 1, 100]], ExpiresIn=300)
    r = post(form["url"], form["fields"], b"hello form", filename="greeting.txt")
    assert r.status_code == 204, r.text
    got = s3.get_object(Bucket=bucket, Key="uploads/greeting.txt")
    assert got["Body"].read() == b"hello form"
    assert got["ContentType"] == "text/plain" and got["Metadata"] == {"who": "form"}
    assert r.headers["etag"] == got["ETag"]
    # size out of the range, a field the policy does not allow, a key outside the prefix
    r = post(form["url"], form["fields"], b"x" * 101)
    assert (r.status_code, xml_code(r)) == (400, "EntityTooLarge")
    r = post(form["url"], form["fields"], b"")
    assert (r.status_code, xml_code(r)) == (400, "EntityTooSmall")
    r = post(form["url"], {**form["fields"], "x-amz-meta-extra": "1"})
    assert (r.status_code, xml_code(r)) == (403, "AccessDenied") and "Extra input fields" in r.text
    r = post(form["url"], {**form["fields"], "key": "elsewhere/x"})
    assert (r.status_code, xml_code(r)) == (403, "AccessDenied")
    # a condition on the key may name the stored key, ${filename} replaced
    named = s3.generate_presigned_post(bucket, "${filename}", Conditions=[["starts-with", "$key", "report"]],
                                       ExpiresIn=300)
    assert post(named["url"], named["fields"], b"by name", filename="report.csv").status_code == 204
    assert s3.get_object(Bucket=bucket, Key="report.csv")["Body"].read() == b"by name"
    r = post(named["url"], named["fields"], b"by name", filename="other.csv")
    assert (r.status_code, xml_code(r)) == (403, "AccessDenied")
    r = post(form["url"], {**form["fields"], "x-amz-signature": "0" * 64})
    assert (r.status_code, xml_code(r)) == (403, "SignatureDoesNotMatch")
    # fields named x-ignore-* are ignored
    r = post(form["url"], {**form["fields"], "x-ignore-me": "1"})
    assert r.status_code == 204


def test_success_actions(s3, bucket):
    for status, expected in (("201", 201), ("200", 200), ("404", 204)):
        form = s3.generate_presigned_post(bucket, f"s-{status}", Fields={"success_action_status": status},
                                          Conditions=[{"success_action_status": status}])
        r = post(form["url"], form["fields"])
        assert r.status_code == expected, r.text
        if expected == 201:
            assert f"<Key>s-{status}</Key>" in r.text and f"<Bucket>{bucket}</Bucket>" in r.text
            assert "<ETag>" in r.text and f"<Location>{form['url']}/s-{status}</Location>" in r.text
            assert r.headers["location"] == f"{form['url']}/s-{status}"
    target = "http://example.invalid/done"
    form = s3.generate_presigned_post(bucket, "redir", Fields={"success_action_redirect": target},
                                      Conditions=[{"success_action_redirect": target}])
    r = post(form["url"], form["fields"])
    assert r.status_code == 303
    assert r.headers["location"].startswith(target + "?bucket=" + bucket + "&key=redir&etag=")


def test_sigv2_form(gateway, bucket):
    v2 = boto3.client("s3", endpoint_url=gateway.endpoint, aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
                      region_name="us-east-1", config=Config(signature_version="s3", s3={"addressing_style": "path"}))
    form = v2.generate_presigned_post(bucket, "v2-form")
    assert "AWSAccessKeyId" in form["fields"] and "signature" in form["fields"]
    r = post(form["url"], form["fields"], b"v2 form bytes")
    assert r.status_code == 204, r.text
    assert v2.get_object(Bucket=bucket, Key="v2-form")["Body"].read() == b"v2 form bytes"
    r = post(form["url"], {**form["fields"], "signature": "AAAA"})
    assert (r.status_code, xml_code(r)) == (403, "SignatureDoesNotMatch")
    r = post(form["url"], {k: v for k, v in form["fields"].items() if k != "signature"})
    assert (r.status_code, xml_code(r)) == (400, "InvalidArgument")
    r = post(form["url"], {**form["fields"], "AWSAccessKeyId": "NOSUCHKEY"})
    assert (r.status_code, xml_code(r)) == (403, "InvalidAccessKeyId")


def _signed_policy_form(s3, bucket, policy: dict | str, form: dict) -> tuple[str, dict]:
    """``form`` (from generate_presigned_post) with ``policy`` as its policy, correctly signed."""
    fields = dict(form["fields"])
    raw = policy if isinstance(policy, str) else json.dumps(policy)
    fields["policy"] = base64.b64encode(raw.encode()).decode()
    key = ("AWS4" + SECRET).encode()
    for part in (fields["x-amz-date"][:8], "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    fields["x-amz-signature"] = hmac.new(key, fields["policy"].encode(), hashlib.sha256).hexdigest()
    return form["url"], fields


def test_bad_policies(s3, bucket):
    def conditions(fields):
        return [{"bucket": bucket}, {"key": fields.get("key", "bad")}, {"x-amz-algorithm": fields["x-amz-algorithm"]},
                {"x-amz-credential": fields["x-amz-credential"]}, {"x-amz-date": fields["x-amz-date"]}]

    form = s3.generate_presigned_post(bucket, "bad")
    base = form["fields"]
    cases = [
        ({"expiration": "2000-01-01T00:00:00Z", "conditions": conditions(base)}, 403, "AccessDenied"),
        ({"expiration": "Mon, 07 Jan 2030 00:00:00 GMT", "conditions": conditions(base)}, 400,
         "InvalidPolicyDocument"),
        ({"conditions": conditions(base)}, 400, "InvalidPolicyDocument"),
        ({"EXPIRATION": "2100-01-01T00:00:00Z", "conditions": conditions(base)}, 400, "InvalidPolicyDocument"),
        ({"expiration": "2100-01-01T00:00:00Z"}, 400, "InvalidPolicyDocument"),
        ({"expiration": "2100-01-01T00:00:00Z", "CONDITIONS": conditions(base)}, 400, "InvalidPolicyDocument"),
        ({"expiration": "2100-01-01T00:00:00Z", "conditions": conditions(base) + [{}]}, 400,
         "InvalidPolicyDocument"),
        ({"expiration": "2100-01-01T00:00:00Z", "conditions": conditions(base) + [["content-length-range", 0]]},
         400, "InvalidPolicyDocument"),
        ({"expiration": "2100-01-01T00:00:00Z", "conditions": conditions(base) + [["content-length-range", -1, 0]]},
         400, "InvalidPolicyDocument"),
        ({"expiration": "2100-01-01T00:00:00Z", "conditions": conditions(base) + [["content-length-range", 0, 0]]},
         400, "EntityTooLarge"),
        ({"expiration": "2100-01-01T00:00:00Z", "conditions": conditions(base)[1:]}, 403, "AccessDenied"),
        ({"expiration": "2100-01-01T00:00:00Z", "conditions": conditions(base) + [["eq", "$x-amz-meta-foo", ""]]},
         403, "AccessDenied"),
        ("{not json", 400, "InvalidPolicyDocument"),
    ]
    for policy, status, code in cases:
        url, fields = _signed_policy_form(s3, bucket, policy, form)
        r = post(url, fields)
        assert (r.status_code, xml_code(r)) == (status, code), (policy, r.text)
    ok_url, ok_fields = _signed_policy_form(s3, bucket, {"expiration": "2100-01-01T00:00:00Z",
                                                         "conditions": conditions(base)}, form)
    assert post(ok_url, ok_fields).status_code == 204
    r = post(ok_url, {k: v for k, v in ok_fields.items() if k != "key"})
    assert (r.status_code, xml_code(r)) == (400, "InvalidArgument")
    r = requests.post(ok_url, data=ok_fields, files={"not-a-file": ("a", b"a")})  # no file part
    assert (r.status_code, xml_code(r)) == (400, "InvalidArgument")
    r = requests.post(ok_url, data=b"--x\r\ngarbage", headers={"Content-Type": "multipart/form-data; boundary=x"})
    assert (r.status_code, xml_code(r)) == (400, "MalformedPOSTRequest")
    r = requests.post(ok_url, data=b"whatever", headers={"Content-Type": "multipart/form-data"})
    assert (r.status_code, xml_code(r)) == (400, "MalformedPOSTRequest")


def test_anonymous_form(gateway, s3):
    name = f"b-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    url = f"{gateway.endpoint}/{name}"
    r = post(url, {"key": "anon.txt", "Content-Type": "text/plain"})
    assert (r.status_code, xml_code(r)) == (403, "AccessDenied")
    s3.put_bucket_acl(Bucket=name, ACL="public-read-write")
    r = post(url, {"key": "anon.txt", "acl": "public-read", "Content-Type": "text/plain"}, b"from a browser")
    assert r.status_code == 204, r.text
    assert requests.get(f"{url}/anon.txt").content == b"from a browser"
    r = post(url, {"key": "anon2", "policy": "e30="})
    assert (r.status_code, xml_code(r)) == (400, "InvalidArgument")


def test_form_to_virtual_host_bucket(gateway, s3, bucket):
    form = s3.generate_presigned_post(bucket, "addr")
    r = requests.post(f"{gateway.endpoint}/", data=form["fields"], files={"file": ("a", b"addr")},
                      headers={"Host": f"{bucket}.localhost:{gateway.port}"})
    assert r.status_code == 204, r.text
    assert s3.get_object(Bucket=bucket, Key="addr")["Body"].read() == b"addr"


def test_form_with_server_side_encryption(s3, bucket):
    """SSE fields of a form encrypt the upload as the same headers would on PutObject."""
    key = os.urandom(32)
    sse_c = {"x-amz-server-side-encryption-customer-algorithm": "AES256",
             "x-amz-server-side-encryption-customer-key": base64.b64encode(key).decode(),
             "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(hashlib.md5(key).digest()).decode()}
    form = s3.generate_presigned_post(bucket, "secret.txt", Fields=sse_c,
                                      Conditions=[{k: v} for k, v in sse_c.items()], ExpiresIn=300)
    assert post(form["url"], form["fields"], b"customer keyed").status_code == 204
    got = s3.get_object(Bucket=bucket, Key="secret.txt", SSECustomerAlgorithm="AES256", SSECustomerKey=key)
    assert got["Body"].read() == b"customer keyed"
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="secret.txt")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    form = s3.generate_presigned_post(bucket, "s3key.txt", Fields={"x-amz-server-side-encryption": "AES256"},
                                      Conditions=[{"x-amz-server-side-encryption": "AES256"}], ExpiresIn=300)
    r = post(form["url"], form["fields"], b"appliance keyed")
    assert r.status_code == 204 and r.headers["x-amz-server-side-encryption"] == "AES256"
    assert s3.head_object(Bucket=bucket, Key="s3key.txt")["ServerSideEncryption"] == "AES256"
    # a form without SSE fields gets the bucket's default encryption, as PutObject does
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    form = s3.generate_presigned_post(bucket, "plain.txt", ExpiresIn=300)
    assert post(form["url"], form["fields"], b"by default").status_code == 204
    assert s3.head_object(Bucket=bucket, Key="plain.txt")["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="plain.txt")["Body"].read() == b"by default"
