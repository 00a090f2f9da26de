"""The aws CLI (PyPI awscli, a second client beside boto3's direct calls) through the S3
families a user drives from a shell: bucket policy, default and customer-key encryption,
Object Lock, conditional writes, checksums and attributes, multipart, versioning and
lifecycle validation. Each step asserts what the CLI prints or the error code it reports."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from services.object.tests.gatewayproc import USER_ACCESS, USER_SECRET

AWS = shutil.which("aws", path=os.path.dirname(sys.executable)) or shutil.which("aws")
pytestmark = pytest.mark.skipif(not AWS, reason="the aws CLI (PyPI awscli) is installed with the test extra")


class CliError(Exception):
    pass


@pytest.fixture
def cli(gateway, tmp_path):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=USER_ACCESS, AWS_SECRET_ACCESS_KEY=USER_SECRET,
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))

    def run(*args, expect: str | None = None):
        """``aws s3api ARGS`` (or ``aws s3 ...`` when the first arg is "s3"): its JSON output;
        with ``expect``, the command must fail naming that error code."""
        cmd = [AWS, "--endpoint-url", gateway.endpoint] + (list(args) if args[0] == "s3" else ["s3api", *args])
        out = subprocess.run(cmd + ["--output", "json"], env=env, capture_output=True, text=True, timeout=120)
        if expect is not None:
            assert out.returncode != 0, f"{args} succeeded, expected {expect}"
            assert f"({expect})" in out.stderr, out.stderr
            return None
        if out.returncode != 0:
            raise CliError(f"{args}: {out.stderr.strip()}")
        return json.loads(out.stdout) if out.stdout.strip().startswith("{") else out.stdout
    return run


@pytest.fixture
def name():
    return f"cli-{uuid.uuid4().hex[:12]}"


def test_policy_encryption_and_conditional_writes(cli, name, tmp_path):
    cli("create-bucket", "--bucket", name)
    src = tmp_path / "obj.bin"
    src.write_bytes(os.urandom(100_000))
    # bucket default encryption: SSE-S3 applied to a plain PUT and reported back
    cli("put-bucket-encryption", "--bucket", name, "--server-side-encryption-configuration",
        json.dumps({"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}))
    enc = cli("get-bucket-encryption", "--bucket", name)
    assert enc["ServerSideEncryptionConfiguration"]["Rules"][0]["ApplyServerSideEncryptionByDefault"] == \
        {"SSEAlgorithm": "AES256"}
    put = cli("put-object", "--bucket", name, "--key", "plain", "--body", str(src))
    assert put["ServerSideEncryption"] == "AES256"
    # a customer key: needed (and checked) on every read
    key = uuid.uuid4().hex      # 32 bytes; the CLI base64-encodes it and sends its MD5
    cli("put-object", "--bucket", name, "--key", "ssec", "--body", str(src), "--sse-customer-algorithm", "AES256",
        "--sse-customer-key", key)
    cli("head-object", "--bucket", name, "--key", "ssec", expect="400")
    got = tmp_path / "ssec.out"
    cli("get-object", "--bucket", name, "--key", "ssec", "--sse-customer-algorithm", "AES256",
        "--sse-customer-key", key, str(got))
    assert got.read_bytes() == src.read_bytes()
    # conditional writes: If-None-Match: * creates once
    cli("put-object", "--bucket", name, "--key", "marker", "--body", str(src), "--if-none-match", "*")
    cli("put-object", "--bucket", name, "--key", "marker", "--body", str(src), "--if-none-match", "*",
        expect="PreconditionFailed")
    # an explicit Deny in the bucket policy binds the owner too
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": f"arn:aws:s3:::{name}/*"}]}
    cli("put-bucket-policy", "--bucket", name, "--policy", json.dumps(policy))
    assert json.loads(cli("get-bucket-policy", "--bucket", name)["Policy"]) == policy
    assert cli("get-bucket-policy-status", "--bucket", name)["PolicyStatus"]["IsPublic"] is False
    cli("delete-object", "--bucket", name, "--key", "plain", expect="AccessDenied")
    cli("delete-bucket-policy", "--bucket", name)
    cli("delete-object", "--bucket", name, "--key", "plain")
    cli("head-object", "--bucket", name, "--key", "plain", expect="404")


def test_object_lock_checksums_multipart_versioning_lifecycle(cli, name, tmp_path):
    cli("create-bucket", "--bucket", name, "--object-lock-enabled-for-bucket")
    assert cli("get-bucket-versioning", "--bucket", name)["Status"] == "Enabled"
    src = tmp_path / "locked.bin"
    src.write_bytes(os.urandom(4096))
    put = cli("put-object", "--bucket", name, "--key", "ckpt", "--body", str(src), "--checksum-algorithm", "CRC32")
    version = put["VersionId"]
    attrs = cli("get-object-attributes", "--bucket", name, "--key", "ckpt",
                "--object-attributes", "Checksum", "ObjectSize", "ETag")
    assert attrs["ObjectSize"] == 4096 and "ChecksumCRC32" in attrs["Checksum"]
    assert attrs["ETag"] == hashlib.md5(src.read_bytes()).hexdigest()
    cli("put-object-retention", "--bucket", name, "--key", "ckpt", "--version-id", version,
        "--retention", json.dumps({"Mode": "GOVERNANCE", "RetainUntilDate": "2099-01-01T00:00:00Z"}))
    assert cli("get-object-retention", "--bucket", name, "--key", "ckpt", "--version-id", version)[
        "Retention"]["Mode"] == "GOVERNANCE"
    cli("delete-object", "--bucket", name, "--key", "ckpt", "--version-id", version, expect="AccessDenied")
    cli("put-object-legal-hold", "--bucket", name, "--key", "ckpt", "--version-id", version,
        "--legal-hold", json.dumps({"Status": "ON"}))
    cli("delete-object", "--bucket", name, "--key", "ckpt", "--version-id", version,
        "--bypass-governance-retention", expect="AccessDenied")      # the legal hold still holds
    cli("put-object-legal-hold", "--bucket", name, "--key", "ckpt", "--version-id", version,
        "--legal-hold", json.dumps({"Status": "OFF"}))
    cli("delete-object", "--bucket", name, "--key", "ckpt", "--version-id", version, "--bypass-governance-retention")
    # multipart through `aws s3 cp` (8 MiB parts), then one part read back by number
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(20 << 20))
    cli("s3", "cp", str(big), f"s3://{name}/big.bin", "--only-show-errors")
    head = cli("head-object", "--bucket", name, "--key", "big.bin", "--part-number", "2")
    assert head["PartsCount"] == 3 and head["ContentLength"] == 8 << 20
    back = tmp_path / "big.out"
    cli("s3", "cp", f"s3://{name}/big.bin", str(back), "--only-show-errors")
    assert back.read_bytes() == big.read_bytes()
    # lifecycle rules are validated: two rules with one ID
    rule = {"ID": "same", "Status": "Enabled", "Filter": {"Prefix": "tmp/"}, "Expiration": {"Days": 1}}
    cli("put-bucket-lifecycle-configuration", "--bucket", name, "--lifecycle-configuration",
        json.dumps({"Rules": [rule, dict(rule, Filter={"Prefix": "old/"})]}), expect="InvalidArgument")
