"""Bucket CORS: the configuration's API and validation, preflight OPTIONS answered by the
rules, and CORS headers on actual responses (presigned ones and errors too)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import requests
from botocore.exceptions import ClientError

from services.object.tests import s3raw
from services.object.tests.gatewayproc import ACCESS, SECRET

RULES = [
    {"ID": "app", "AllowedOrigins": ["https://app.example.com", "https://*.example.org"],
     "AllowedMethods": ["GET", "PUT"], "AllowedHeaders": ["Content-Type", "x-amz-*"],
     "ExposeHeaders": ["ETag", "x-amz-request-id"], "MaxAgeSeconds": 600},
    {"AllowedOrigins": ["*"], "AllowedMethods": ["HEAD"]},
]


def code_of(exc_info):
    return exc_info.value.response["Error"]["Code"], exc_info.value.response["ResponseMetadata"]["HTTPStatusCode"]


def put_raw(gateway, bucket, body: bytes) -> requests.Response:
    url = f"{gateway.endpoint}/{bucket}?cors"
    return requests.put(url, data=body, headers=s3raw.sign("PUT", url, ACCESS, SECRET, hashlib.sha256(body).hexdigest()))


def test_cors_configuration_roundtrip_and_validation(gateway, s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert code_of(e) == ("NoSuchCORSConfiguration", 404)
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES
    bad = [
        (b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin>", 400, "MalformedXML"),
        (b"<CORSConfiguration></CORSConfiguration>", 400, "MalformedXML"),
        (b"<CORSConfiguration><CORSRule><AllowedMethod>GET</AllowedMethod></CORSRule></CORSConfiguration>",
         400, "MalformedXML"),
        (b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod>"
         b"</CORSRule></CORSConfiguration>", 400, "InvalidRequest"),
        (b"<CORSConfiguration><CORSRule><AllowedOrigin>http://*.*.com</AllowedOrigin><AllowedMethod>GET"
         b"</AllowedMethod></CORSRule></CORSConfiguration>", 400, "InvalidRequest"),
        (b"<CORSConfiguration>" + b"<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
         b"</CORSRule>" * 101 + b"</CORSConfiguration>", 400, "MalformedXML"),
    ]
    for body, status, code in bad:
        r = put_raw(gateway, bucket, body)
        assert (r.status_code, s3raw_code(r.text)) == (status, code), (body[:80], r.text)
    r = put_raw(gateway, bucket, bad[3][0])
    assert "Found unsupported HTTP method in CORS config. Unsupported method is PATCH" in r.text
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == RULES  # unchanged by the refusals
    s3.delete_bucket_cors(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_cors(Bucket=bucket)
    assert code_of(e) == ("NoSuchCORSConfiguration", 404)


def s3raw_code(text: str) -> str:
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""


def test_preflight_answered_by_the_rules(gateway, s3, bucket):
    url = f"{gateway.endpoint}/{bucket}/some/key"
    pre = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "PUT"}
    r = requests.options(url, headers=pre)
    assert r.status_code == 403 and s3raw_code(r.text) == "CORSResponse"
    assert "CORS is not enabled for this bucket." in r.text
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    r = requests.options(url, headers={**pre, "Access-Control-Request-Headers": "content-type, x-amz-meta-a"})
    assert r.status_code == 200, r.text
    h = r.headers
    assert h["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert h["Access-Control-Allow-Methods"] == "GET, PUT"
    assert h["Access-Control-Allow-Headers"] == "content-type, x-amz-meta-a"
    assert h["Access-Control-Expose-Headers"] == "ETag, x-amz-request-id"
    assert h["Access-Control-Max-Age"] == "600"
    assert h["Access-Control-Allow-Credentials"] == "true"
    assert "Origin" in h["Vary"]
    # a wildcard origin pattern; an origin allowed for "*" is answered "*"
    r = requests.options(url, headers={"Origin": "https://a.example.org", "Access-Control-Request-Method": "GET"})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "https://a.example.org"
    r = requests.options(url, headers={"Origin": "http://any.where", "Access-Control-Request-Method": "HEAD"})
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in r.headers
    refused = [
        {"Origin": "https://evil.example.com", "Access-Control-Request-Method": "GET"},      # origin
        {"Origin": "https://app.example.com", "Access-Control-Request-Method": "DELETE"},   # method
        {**pre, "Access-Control-Request-Headers": "x-other"},                               # header
    ]
    for headers in refused:
        r = requests.options(url, headers=headers)
        assert r.status_code == 403 and s3raw_code(r.text) == "CORSResponse", headers
        assert "Access-Control-Allow-Origin" not in r.headers
    r = requests.options(url, headers={"Access-Control-Request-Method": "GET"})
    assert r.status_code == 400 and s3raw_code(r.text) == "BadRequest"
    r = requests.options(url, headers={"Origin": "https://app.example.com"})
    assert r.status_code == 400 and s3raw_code(r.text) == "BadRequest"
    r = requests.options(f"{gateway.endpoint}/no-such-bucket-cors/k", headers=pre)
    assert r.status_code == 404 and s3raw_code(r.text) == "NoSuchBucket"


def test_cors_headers_on_actual_presigned_and_error_responses(gateway, s3, bucket):
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": RULES})
    s3.put_object(Bucket=bucket, Key="k", Body=b"body")
    origin = {"Origin": "https://app.example.com"}
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=300)
    r = requests.get(url, headers=origin)
    assert r.status_code == 200 and r.content == b"body"
    assert r.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert r.headers["Access-Control-Expose-Headers"] == "ETag, x-amz-request-id"
    assert r.headers["Vary"] == "Origin"
    # a presigned PUT, as a browser upload does
    put = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "up"}, ExpiresIn=300)
    r = requests.put(put, data=b"from the browser", headers=origin)
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    # an error answer carries them too (so the page can read the error)
    missing = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "missing"}, ExpiresIn=300)
    r = requests.get(missing, headers=origin)
    assert r.status_code == 404 and r.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    r = requests.get(url.replace("X-Amz-Signature=", "X-Amz-Signature=0"), headers=origin)
    assert r.status_code == 403 and r.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    # no header for an origin or method no rule allows, nor without an Origin
    r = requests.get(url, headers={"Origin": "https://evil.example.com"})
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers
    delete = s3.generate_presigned_url("delete_object", Params={"Bucket": bucket, "Key": "up"}, ExpiresIn=300)
    r = requests.delete(delete, headers=origin)
    assert r.status_code == 204 and "Access-Control-Allow-Origin" not in r.headers
    r = requests.get(url)
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers


def test_aws_cli_sets_cors_and_policy(gateway, bucket, tmp_path):
    aws = shutil.which("aws", path=os.path.dirname(sys.executable)) or shutil.which("aws")
    if not aws:
        pytest.skip("the aws CLI (PyPI awscli) is not installed")
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1",
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))

    def s3api(*args, check=True):
        return subprocess.run([aws, "--endpoint-url", gateway.endpoint, "s3api", *args, "--bucket", bucket],
                              env=env, check=check, capture_output=True, text=True, timeout=60)

    (tmp_path / "cors.json").write_text(json.dumps({"CORSRules": RULES}))
    s3api("put-bucket-cors", "--cors-configuration", f"file://{tmp_path / 'cors.json'}")
    assert json.loads(s3api("get-bucket-cors").stdout)["CORSRules"] == RULES
    bad = {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                          "Resource": "arn:aws:s3:::elsewhere/*"}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    r = s3api("put-bucket-policy", "--policy", f"file://{tmp_path / 'bad.json'}", check=False)
    assert r.returncode != 0 and "MalformedPolicy" in r.stderr and "Policy has invalid resource" in r.stderr
