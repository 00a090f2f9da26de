"""Large bodies (written in place with direct I/O from aligned buffers): every size around the
4 KiB block and the 2 MiB buffer reads back byte for byte, with its MD5 as ETag, also in
ranges that cross those boundaries; a bad Content-MD5 leaves no object and no file."""
from __future__ import annotations

import base64
import hashlib
import os

import pytest
from botocore.exceptions import ClientError

KIB, MIB = 1024, 1024 * 1024
SIZES = [128 * KIB, 128 * KIB + 1, MIB - 1, MIB, MIB + 4095, 2 * MIB - 1, 2 * MIB, 2 * MIB + 1,
         5 * MIB + 4097]


def test_sizes_around_blocks_and_buffers_read_back(s3, bucket):
    bodies = {f"obj-{size}": os.urandom(size) for size in SIZES}
    for key, data in bodies.items():
        md5 = hashlib.md5(data)
        out = s3.put_object(Bucket=bucket, Key=key, Body=data, ContentMD5=base64.b64encode(md5.digest()).decode())
        assert out["ETag"] == f'"{md5.hexdigest()}"'
    for key, data in bodies.items():
        got = s3.get_object(Bucket=bucket, Key=key)
        assert got["ContentLength"] == len(data)
        assert got["Body"].read() == data
    data = bodies[f"obj-{5 * MIB + 4097}"]
    for start, end in ((4090, 4200), (2 * MIB - 10, 2 * MIB + 10), (5 * MIB, 5 * MIB + 4096)):
        got = s3.get_object(Bucket=bucket, Key=f"obj-{5 * MIB + 4097}", Range=f"bytes={start}-{end}")
        assert got["Body"].read() == data[start:end + 1]


def test_bad_content_md5_leaves_nothing(gateway, s3, bucket):
    data = os.urandom(3 * MIB + 5)
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    data_dir = os.path.join(gateway.data_root, "buckets", bucket, "data")

    def files() -> int:
        return sum(len(names) for _, _, names in os.walk(data_dir))

    before = files()
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="bad", Body=data, ContentMD5=wrong)
    assert err.value.response["Error"]["Code"] == "BadDigest"
    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket=bucket, Key="bad")
    assert err.value.response["Error"]["Code"] == "404"
    assert files() == before
