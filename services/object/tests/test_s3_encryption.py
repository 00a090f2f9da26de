"""Server-side encryption through boto3 (and s5cmd): SSE-S3, SSE-KMS, SSE-C, bucket default
encryption, multipart and copies; the exact statuses, error codes and headers S3 gives; and the
bytes at rest, read from the raw files under the data root, hold no plaintext."""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
import requests
from botocore.exceptions import ClientError

from services.object.tests import s3raw
from services.object.tests.gatewayproc import ACCESS, ADMIN_TOKEN, SECRET, GatewayProcess

MIB = 1024 * 1024
KMS_KEY = "ckpt-key-1"
KMS_ARN = f"arn:aws:kms:us-east-1:000000000000:key/{KMS_KEY}"   # how S3 names the key in responses
MASTER = base64.b64encode(b"m" * 32).decode()


@pytest.fixture(scope="module")
def sse_gateway():
    workdir = tempfile.mkdtemp(prefix="strata-test-")
    cold = os.path.join(workdir, "capacity")
    os.makedirs(cold)
    with GatewayProcess.running(workdir, sse_master_key=MASTER, kms_keys=[KMS_KEY],
                                cold_root=cold, lifecycle_day_seconds=1, lifecycle_interval=0,
                                segment_bytes=256 * 1024, compaction_interval=3600) as gw:
        gw.cold_root = cold
        yield gw


@pytest.fixture
def s3(sse_gateway):
    return sse_gateway.client()


@pytest.fixture
def bucket(s3):
    name = f"enc-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def error_of(exc_info) -> tuple[int, str]:
    resp = exc_info.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


def customer(key: str) -> dict:
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}


def encoded(key: str) -> dict:
    """SSE-C parameters as sent (botocore encodes them itself only for some operations)."""
    raw = key.encode()
    return {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": base64.b64encode(raw).decode(),
            "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(raw).digest()).decode()}


def new_key() -> str:
    """A 256-bit customer key (boto3 takes it as text and sends its bytes base64-encoded)."""
    return uuid.uuid4().hex


def marked(size: int) -> tuple[bytes, bytes]:
    """A body of ``size`` bytes made of a unique marker repeated (findable on disk)."""
    marker = f"PLAINTEXT-{uuid.uuid4().hex}".encode()
    return marker, (marker * (size // len(marker) + 1))[:size]


def found_on_disk(root: str, needle: bytes) -> list[str]:
    """Files under ``root`` whose raw bytes contain ``needle``. Every regular file is read
    (the tests run as root): one that cannot be read fails the check instead of being
    skipped. Sockets and FIFOs hold no data at rest; a file removed between the listing and
    its read (a compaction's old segment) is no longer on disk."""
    hits = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
                with open(path, "rb") as fh:
                    data = fh.read()
            except FileNotFoundError:
                continue
            if needle in data:
                hits.append(path)
    return hits


def test_sse_s3_put_get_head_ranges_and_no_plaintext_at_rest(s3, bucket, sse_gateway):
    small_marker, small = marked(5000)                  # a segment object
    large_marker, large = marked(3 * MIB + 12345)      # its own file, packages across 1 MiB reads
    plain_marker, plain = marked(4000)                  # control: unencrypted, found on disk
    put = s3.put_object(Bucket=bucket, Key="small", Body=small, ServerSideEncryption="AES256")
    assert put["ServerSideEncryption"] == "AES256"
    assert put["ETag"] == f'"{hashlib.md5(small).hexdigest()}"'
    assert s3.put_object(Bucket=bucket, Key="large", Body=large, ServerSideEncryption="AES256")[
        "ServerSideEncryption"] == "AES256"
    s3.put_object(Bucket=bucket, Key="plain", Body=plain)
    got = s3.get_object(Bucket=bucket, Key="large")
    assert got["ServerSideEncryption"] == "AES256"
    assert got["Body"].read() == large
    head = s3.head_object(Bucket=bucket, Key="small")
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == len(small)
    assert "ServerSideEncryption" not in s3.head_object(Bucket=bucket, Key="plain")
    ranges = [(0, 0), (65535, 65536), (65530, 200000), (MIB - 7, 2 * MIB + 3), (len(large) - 10, len(large) - 1)]
    for start, end in ranges:
        part = s3.get_object(Bucket=bucket, Key="large", Range=f"bytes={start}-{end}")
        assert part["Body"].read() == large[start:end + 1], (start, end)
        assert part["ContentRange"] == f"bytes {start}-{end}/{len(large)}"
    assert s3.get_object(Bucket=bucket, Key="small", Range="bytes=-100")["Body"].read() == small[-100:]
    root = sse_gateway.data_root
    assert found_on_disk(root, plain_marker), "the scan must find an unencrypted object"
    assert found_on_disk(root, small_marker) == []
    assert found_on_disk(root, large_marker) == []


def test_sse_kms_key_ids(sse_gateway, s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"kms data", ServerSideEncryption="aws:kms",
                        SSEKMSKeyId=KMS_KEY)
    assert (put["ServerSideEncryption"], put["SSEKMSKeyId"]) == ("aws:kms", KMS_ARN)
    head = s3.head_object(Bucket=bucket, Key="k")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", KMS_ARN)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"kms data"
    # a read names no SSE-S3/KMS parameters (the object knows how it is encrypted): 400
    for ask in ({"x-amz-server-side-encryption": "aws:kms"},
                {"x-amz-server-side-encryption-aws-kms-key-id": KMS_KEY}):
        for op in ("GetObject", "HeadObject"):
            url, method = f"{sse_gateway.endpoint}/{bucket}/k", "GET" if op == "GetObject" else "HEAD"
            r = requests.request(method, url, headers=s3raw.sign(method, url, ACCESS, SECRET, headers=ask))
            assert r.status_code == 400, (op, ask, r.status_code)
            if op == "GetObject":
                assert "<Code>InvalidArgument</Code>" in r.text
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ServerSideEncryption="aws:kms", SSEKMSKeyId=KMS_KEY)
    assert up["SSEKMSKeyId"] == KMS_ARN
    part = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"part")
    assert part["SSEKMSKeyId"] == KMS_ARN
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"], MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert done["SSEKMSKeyId"] == KMS_ARN
    assert s3.put_object(Bucket=bucket, Key="arn", Body=b"x", ServerSideEncryption="aws:kms",
                         SSEKMSKeyId=KMS_ARN)["SSEKMSKeyId"] == KMS_ARN
    assert s3.put_object(Bucket=bucket, Key="default", Body=b"x", ServerSideEncryption="aws:kms")[
        "SSEKMSKeyId"] == "arn:aws:kms:us-east-1:000000000000:key/aws/s3"
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"x", ServerSideEncryption="aws:kms", SSEKMSKeyId="no-such-key")
    assert error_of(e) == (400, "KMS.NotFoundException")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"x", ServerSideEncryption="AES512")
    assert error_of(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="bad", Body=b"x", SSEKMSKeyId=KMS_KEY)
    assert error_of(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="bad")


def test_sse_c_key_checked_on_get_head_copy_and_attributes(s3, bucket, sse_gateway):
    key, other = new_key(), new_key()
    marker, body = marked(300 * 1024)
    put = s3.put_object(Bucket=bucket, Key="c", Body=body, **customer(key))
    md5 = base64.b64encode(hashlib.md5(key.encode()).digest()).decode()
    assert (put["SSECustomerAlgorithm"], put["SSECustomerKeyMD5"]) == ("AES256", md5)
    assert "ServerSideEncryption" not in put
    assert put["ETag"] != f'"{hashlib.md5(body).hexdigest()}"'   # an SSE-C ETag is no MD5 of the data
    got = s3.get_object(Bucket=bucket, Key="c", **customer(key))
    assert got["Body"].read() == body and got["SSECustomerKeyMD5"] == md5
    assert s3.get_object(Bucket=bucket, Key="c", Range="bytes=70000-70009", **customer(key))["Body"].read() \
        == body[70000:70010]
    assert s3.head_object(Bucket=bucket, Key="c", **customer(key))["SSECustomerAlgorithm"] == "AES256"
    for call in (s3.get_object, s3.head_object):
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="c")
        assert error_of(e)[0] == 400
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key="c", **customer(other))
        assert error_of(e)[0] == 403
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c")
    assert error_of(e) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", **customer(other))
    assert error_of(e) == (403, "AccessDenied")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="c", SSECustomerAlgorithm="AES256", SSECustomerKey=key,
                      SSECustomerKeyMD5=base64.b64encode(hashlib.md5(other.encode()).digest()).decode())
    assert error_of(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="short", Body=b"x", **customer("k" * 16))
    assert error_of(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="both", Body=b"x", ServerSideEncryption="AES256", **customer(key))
    assert error_of(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as e:
        s3.get_object_attributes(Bucket=bucket, Key="c", ObjectAttributes=["ObjectSize"], **encoded(other))
    assert error_of(e) == (403, "AccessDenied")
    assert s3.get_object_attributes(Bucket=bucket, Key="c", ObjectAttributes=["ObjectSize"],
                                    **encoded(key))["ObjectSize"] == len(body)
    s3.put_object(Bucket=bucket, Key="plain", Body=b"plain")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="plain", **customer(key))
    assert error_of(e) == (400, "InvalidRequest")
    # copies: the source key comes in the copy-source headers; the copy gets its own encryption
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "c"})
    assert error_of(e) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "c"},
                       CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=other)
    assert error_of(e) == (403, "AccessDenied")
    copied = s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "c"},
                            CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=key,
                            ServerSideEncryption="AES256")
    assert copied["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == body
    rekeyed = s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "c"},
                             CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=key,
                             **customer(other))   # key rotation: a copy onto itself is allowed
    assert rekeyed["SSECustomerAlgorithm"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="c", **customer(other))["Body"].read() == body
    assert found_on_disk(sse_gateway.data_root, marker) == []


def test_bucket_default_encryption(s3, bucket):
    with pytest.raises(ClientError) as e:
        s3.get_bucket_encryption(Bucket=bucket)
    assert error_of(e) == (404, "ServerSideEncryptionConfigurationNotFoundError")
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    assert s3.put_object(Bucket=bucket, Key="a", Body=b"a")["ServerSideEncryption"] == "AES256"
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")
    assert up["ServerSideEncryption"] == "AES256"
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"])
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": KMS_KEY},
         "BucketKeyEnabled": True}]})
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert rule["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": KMS_KEY}
    assert rule["BucketKeyEnabled"] is True
    put = s3.put_object(Bucket=bucket, Key="b", Body=b"b")
    assert (put["ServerSideEncryption"], put["SSEKMSKeyId"], put["BucketKeyEnabled"]) == ("aws:kms", KMS_ARN, True)
    # a request's own choice wins over the default
    assert s3.put_object(Bucket=bucket, Key="c", Body=b"c", ServerSideEncryption="AES256")[
        "ServerSideEncryption"] == "AES256"
    with pytest.raises(ClientError) as e:
        s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "nope"}}]})
    assert error_of(e) == (400, "KMS.NotFoundException")
    with pytest.raises(ClientError) as e:
        s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
            {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256", "KMSMasterKeyID": KMS_KEY}}]})
    assert error_of(e) == (400, "InvalidArgument")
    s3.delete_bucket_encryption(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        s3.get_bucket_encryption(Bucket=bucket)
    assert error_of(e) == (404, "ServerSideEncryptionConfigurationNotFoundError")
    assert "ServerSideEncryption" not in s3.put_object(Bucket=bucket, Key="d", Body=b"d")
    assert s3.get_object(Bucket=bucket, Key="b")["Body"].read() == b"b"


def test_bucket_encryption_malformed_documents_get_400(sse_gateway, bucket):
    from services.object.tests.s3raw import sign
    import requests
    url = f"{sse_gateway.endpoint}/{bucket}?encryption"
    for body in (b"<not xml", b"<ServerSideEncryptionConfiguration/>",
                 b"<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault>"
                 b"</ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>"):
        headers = sign("PUT", url, ACCESS, SECRET, hashlib.sha256(body).hexdigest())
        resp = requests.put(url, data=body, headers=headers, timeout=10)
        assert resp.status_code == 400 and b"<Code>MalformedXML</Code>" in resp.content, resp.content


def test_multipart_encrypted_sse_s3_and_sse_c(s3, bucket, sse_gateway):
    marker, body = marked(11 * MIB + 777)
    parts = [body[:5 * MIB], body[5 * MIB:10 * MIB], body[10 * MIB:]]
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp", ServerSideEncryption="AES256")
    assert up["ServerSideEncryption"] == "AES256"
    etags = []
    for i, data in enumerate(parts, 1):
        res = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=i, Body=data)
        assert res["ServerSideEncryption"] == "AES256"
        etags.append(res["ETag"])
    # a part uploaded again under the same number (same data key, new nonce prefix)
    etags[1] = s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=2, Body=parts[1])["ETag"]
    done = s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"], MultipartUpload={
        "Parts": [{"PartNumber": i, "ETag": e} for i, e in enumerate(etags, 1)]})
    assert done["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == body
    start, end = 5 * MIB - 100, 10 * MIB + 100
    assert s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={start}-{end}")["Body"].read() == body[start:end + 1]
    assert s3.get_object(Bucket=bucket, Key="mp", PartNumber=3)["Body"].read() == parts[2]
    assert s3.head_object(Bucket=bucket, Key="mp")["ServerSideEncryption"] == "AES256"
    # SSE-C: every part needs the upload's key
    key = new_key()
    up = s3.create_multipart_upload(Bucket=bucket, Key="mpc", **customer(key))
    assert up["SSECustomerAlgorithm"] == "AES256"
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="mpc", UploadId=up["UploadId"], PartNumber=1, Body=parts[0])
    assert error_of(e) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket=bucket, Key="mpc", UploadId=up["UploadId"], PartNumber=1, Body=parts[0],
                       **customer(new_key()))
    assert error_of(e) == (403, "AccessDenied")
    e1 = s3.upload_part(Bucket=bucket, Key="mpc", UploadId=up["UploadId"], PartNumber=1, Body=parts[0],
                        **customer(key))
    assert e1["SSECustomerAlgorithm"] == "AES256"
    e2 = s3.upload_part_copy(Bucket=bucket, Key="mpc", UploadId=up["UploadId"], PartNumber=2,
                             CopySource={"Bucket": bucket, "Key": "mp"}, CopySourceRange=f"bytes=0-{MIB - 1}",
                             **customer(key))
    s3.complete_multipart_upload(Bucket=bucket, Key="mpc", UploadId=up["UploadId"], MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": e1["ETag"]}, {"PartNumber": 2, "ETag": e2["CopyPartResult"]["ETag"]}]})
    got = s3.get_object(Bucket=bucket, Key="mpc", **customer(key))["Body"].read()
    assert got == parts[0] + body[:MIB]
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="mpc")
    assert error_of(e) == (400, "InvalidRequest")
    assert found_on_disk(sse_gateway.data_root, marker) == []


def test_damaged_ciphertext_is_never_returned(s3, bucket, sse_gateway):
    marker, body = marked(2 * MIB)
    s3.put_object(Bucket=bucket, Key="victim", Body=body, ServerSideEncryption="AES256")
    s3.put_object(Bucket=bucket, Key="other", Body=body[:MIB], ServerSideEncryption="AES256")
    data_dir = os.path.join(sse_gateway.data_root, "buckets", bucket, "data")
    files = sorted((os.path.join(d, f) for d, _, fs in os.walk(data_dir) for f in fs), key=os.path.getsize)
    victim = files[-1]
    with open(victim, "r+b") as fh:   # flip one bit in the second package
        fh.seek(70000)
        byte = fh.read(1)
        fh.seek(70000)
        fh.write(bytes([byte[0] ^ 1]))
    assert s3.get_object(Bucket=bucket, Key="victim", Range="bytes=0-1000")["Body"].read() == body[:1001]
    with pytest.raises(Exception):
        s3.get_object(Bucket=bucket, Key="victim", Range="bytes=65536-70000")["Body"].read()


S5CMD = shutil.which("s5cmd") or os.path.join(os.path.dirname(sys.executable), "s5cmd")


@pytest.mark.skipif(not os.path.exists(S5CMD), reason="s5cmd is installed with the test extra")
def test_s5cmd_writes_and_reads_encrypted_objects(s3, bucket, sse_gateway, tmp_path):
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1"}
    marker, body = marked(MIB + 5)
    src = tmp_path / "ckpt.bin"
    src.write_bytes(body)

    def s5(*args):
        return subprocess.run([S5CMD, "--endpoint-url", sse_gateway.endpoint, *args], env=env,
                              capture_output=True, timeout=60, check=True)

    s5("cp", "--sse", "AES256", str(src), f"s3://{bucket}/s5/aes")
    s5("cp", "--sse", "aws:kms", "--sse-kms-key-id", KMS_KEY, str(src), f"s3://{bucket}/s5/kms")
    assert s3.head_object(Bucket=bucket, Key="s5/aes")["ServerSideEncryption"] == "AES256"
    head = s3.head_object(Bucket=bucket, Key="s5/kms")
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", KMS_ARN)
    assert s5("cat", f"s3://{bucket}/s5/kms").stdout == body
    s5("cp", f"s3://{bucket}/s5/aes", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == body
    assert found_on_disk(sse_gateway.data_root, marker) == []


def admin_post(gw, what: str) -> dict:
    resp = requests.post(f"{gw.endpoint}/_strata/admin/{what}", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                         timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_compaction_and_tier_moves_keep_ciphertext_readable(s3, bucket, sse_gateway):
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [
        {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    small = {f"s/{i}": os.urandom(60_000) for i in range(12)}   # fills and closes 256 KiB segments
    for key, data in small.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    for i in range(0, 12, 2):
        s3.delete_object(Bucket=bucket, Key=f"s/{i}")
    assert admin_post(sse_gateway, "compact")["segments_removed"] >= 1
    for i in range(1, 12, 2):
        got = s3.get_object(Bucket=bucket, Key=f"s/{i}", Range="bytes=100-65600")["Body"].read()
        assert got == small[f"s/{i}"][100:65601]
    # lifecycle moves the ciphertext to the capacity tier as it is; reads stay transparent
    marker, body = marked(6 * MIB + 3)
    s3.put_object(Bucket=bucket, Key="tier/one", Body=body)
    s3.put_object(Bucket=bucket, Key="tier/small", Body=body[:3000], ServerSideEncryption="aws:kms",
                  SSEKMSKeyId=KMS_KEY)
    up = s3.create_multipart_upload(Bucket=bucket, Key="tier/mp")["UploadId"]
    e1 = s3.upload_part(Bucket=bucket, Key="tier/mp", UploadId=up, PartNumber=1, Body=body[:5 * MIB])["ETag"]
    e2 = s3.upload_part(Bucket=bucket, Key="tier/mp", UploadId=up, PartNumber=2, Body=body[5 * MIB:])["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="tier/mp", UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "cold", "Status": "Enabled", "Filter": {"Prefix": "tier/"},
         "Transitions": [{"Days": 1, "StorageClass": "GLACIER_IR"}]}]})
    time.sleep(1.5)  # a lifecycle "day" is a second in this gateway
    stats = admin_post(sse_gateway, "lifecycle")
    assert (stats["transitioned"], stats["transition_failed"]) == (3, 0), stats
    for key, want in (("tier/one", body), ("tier/mp", body), ("tier/small", body[:3000])):
        head = s3.head_object(Bucket=bucket, Key=key)
        assert head["StorageClass"] == "GLACIER_IR" and head["ServerSideEncryption"] in ("AES256", "aws:kms")
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == want
    assert s3.get_object(Bucket=bucket, Key="tier/mp", Range=f"bytes={5 * MIB - 5}-{5 * MIB + 5}")[
        "Body"].read() == body[5 * MIB - 5:5 * MIB + 6]
    assert s3.get_object(Bucket=bucket, Key="tier/mp", PartNumber=2)["Body"].read() == body[5 * MIB:]
    assert found_on_disk(sse_gateway.cold_root, marker) == []
    assert found_on_disk(sse_gateway.data_root, marker) == []
