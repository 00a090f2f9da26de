"""The DCP S3 writer's streams on a real Strata gateway, without the catalog: whatever the
pattern of writes (torch.save's small headers and one large tensor write, or many small
writes), the object reads back byte for byte, is one PUT up to `multipart_threshold` and a
multipart upload past it, and what `record()` keeps (size, sha256) is what was written."""
import hashlib
import os

import pytest

from services.checkpoints.dcp.s3_filesystem import S3FileSystem

pytest.importorskip("boto3", reason="the S3 writer needs boto3")
pytest.importorskip("uvicorn", reason="the S3 gateway needs uvicorn")

MiB = 1 << 20
PART = 5 * MiB  # S3's smallest part


def stream(fs: S3FileSystem, key: str, chunks: list) -> bytes:
    with fs.create_stream(key, "wb") as out:
        for c in chunks:
            assert out.write(memoryview(c)) == len(c)
    fs.close()
    return b"".join(chunks)


@pytest.mark.parametrize("sizes", [
    [1000],                              # one small object
    [200, 37, PART - 237],               # exactly one part
    [200, 2 * PART, 300],                # headers, a tensor, a trailer: one PUT at 2 parts
    [100, 2 * PART - 100],               # exactly the threshold: still one PUT
    [100, 2 * PART - 100, 1],            # one byte past it: multipart, a 1-byte last part
    [4096] * (3 * PART // 4096 + 7),     # many small writes across the part boundaries
    [300, 4 * PART + 123, 40],           # a large write that spans several parts at once
])
def test_stream_reads_back_whole(gateway, sizes):
    fs = S3FileSystem(gateway, "ckpt", part_size=PART, max_concurrency=2, sha256=True,
                      multipart_threshold=2 * PART)
    fs.s3.create_bucket(Bucket="ckpt")
    chunks = [os.urandom(n) for n in sizes]
    want = stream(fs, "v/obj", chunks)
    got = fs.s3.get_object(Bucket="ckpt", Key="v/obj")
    assert got["Body"].read() == want
    multipart = "-" in got["ETag"]
    assert multipart == (len(want) > 2 * PART)
    assert fs.written["v/obj"] == (len(want), hashlib.sha256(want).hexdigest())


def test_a_buffer_reused_by_the_caller_does_not_change_what_was_sent(gateway):
    # torch.save hands memoryviews of buffers it rewrites after write() returns
    fs = S3FileSystem(gateway, "ckpt", part_size=PART, max_concurrency=2,
                      multipart_threshold=PART)
    fs.s3.create_bucket(Bucket="ckpt")
    buf = bytearray(PART // 2 + 11)
    want = []
    with fs.create_stream("v/reused", "wb") as out:
        for i in range(5):
            buf[:] = bytes([i]) * len(buf)
            out.write(memoryview(buf))
            want.append(bytes(buf))
    fs.close()
    assert fs.s3.get_object(Bucket="ckpt", Key="v/reused")["Body"].read() == b"".join(want)


def test_a_stream_that_fails_leaves_no_object_and_no_upload(gateway):
    fs = S3FileSystem(gateway, "ckpt", part_size=PART, max_concurrency=2,
                      multipart_threshold=PART)
    fs.s3.create_bucket(Bucket="ckpt")
    with pytest.raises(RuntimeError, match="serialisation failed"):
        with fs.create_stream("v/broken", "wb") as out:
            out.write(os.urandom(3 * PART))  # parts already uploading
            raise RuntimeError("serialisation failed")
    fs.close()
    assert "Contents" not in fs.s3.list_objects_v2(Bucket="ckpt", Prefix="v/")
    assert not fs.s3.list_multipart_uploads(Bucket="ckpt").get("Uploads")
    assert "v/broken" not in fs.written
