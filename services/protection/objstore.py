"""Send streams stored in S3 as compressed, checksummed chunks plus a manifest (no Django:
boto3 and stdlib only). The tree digest that proves a restore equals its source is
``plumbing.treedigest``.

Layout under ``<prefix>/<backup>/<snapshot>/``: ``chunk-000000``, ``chunk-000001``, ...
each the next ``CHUNK`` bytes of the stream, zlib-compressed when that pays (``codec``),
then ``manifest.json`` written last (a restore point exists only once its manifest does)::

    {"format": 1, "backup", "snapshot", "parent", "kind", "stream_bytes", "stream_sha256",
     "tree_sha256", "chunks": [{"key", "bytes", "stored", "codec", "sha256"}], "created"}

``sha256`` of a chunk is of its uncompressed bytes, checked on restore before the bytes go on.
"""
import hashlib
import json
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config

CHUNK = 8 << 20
LEVEL = 3
SAMPLE = 256 << 10


class ChecksumMismatch(Exception):
    """A chunk read back from the object store is not what was written."""


def s3_client(endpoint_url: str, access_key: str, secret_key: str, region: str = "us-east-1"):
    """A boto3 S3 client for any S3 endpoint (path-style addressing, bounded retries)."""
    return boto3.client(
        "s3", endpoint_url=endpoint_url, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, region_name=region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                      connect_timeout=10, read_timeout=120))


def _rechunk(stream: Iterable[bytes], size: int) -> Iterator[bytes]:
    buf = bytearray()
    for piece in stream:
        buf += piece
        while len(buf) >= size:
            yield bytes(buf[:size])
            del buf[:size]
    if buf:
        yield bytes(buf)


def encode_chunk(raw: bytes) -> tuple:
    """(body, codec): zlib when a sample of the chunk compresses, else the bytes as they
    are ("none"), so incompressible data (most checkpoint shards) costs no CPU."""
    sample = raw[:SAMPLE]
    if len(zlib.compress(sample, 1)) > 0.9 * len(sample):
        return raw, "none"
    body = zlib.compress(raw, LEVEL)
    return (body, "zlib") if len(body) < len(raw) else (raw, "none")


def decode_chunk(body: bytes, codec: str) -> bytes:
    if codec == "none":
        return body
    if codec == "zlib":
        return zlib.decompress(body)
    raise ChecksumMismatch(f"unknown chunk codec {codec!r}: written by a newer Strata?")


def put_stream(s3, bucket: str, prefix: str, stream: Iterable[bytes],
               progress: Callable[[int], None] = lambda done: None,
               workers: int = 2) -> dict:
    """Store ``stream`` as chunks under ``prefix``; return the manifest's stream fields.
    Chunks are encoded and uploaded by ``workers`` threads, at most ``workers + 1`` in
    flight (memory stays at a few chunks)."""
    chunks, total, stored = [], 0, 0
    digest = hashlib.sha256()

    def upload(i: int, raw: bytes) -> dict:
        body, codec = encode_chunk(raw)
        key = f"{prefix}/chunk-{i:06d}"
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        return {"key": key, "bytes": len(raw), "stored": len(body), "codec": codec,
                "sha256": hashlib.sha256(raw).hexdigest()}

    def collect(future) -> None:
        nonlocal total, stored
        chunk = future.result()
        chunks.append(chunk)
        total += chunk["bytes"]
        stored += chunk["stored"]
        progress(total)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = deque()
        try:
            for i, raw in enumerate(_rechunk(stream, CHUNK)):
                digest.update(raw)
                pending.append(pool.submit(upload, i, raw))
                progress(total)  # also where a cancel is noticed, chunk by chunk
                while len(pending) > workers:
                    collect(pending.popleft())
            while pending:
                collect(pending.popleft())
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return {"chunks": chunks, "stream_bytes": total, "stored_bytes": stored,
            "stream_sha256": digest.hexdigest()}


def put_manifest(s3, bucket: str, key: str, manifest: dict) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(manifest, indent=1).encode(),
                  ContentType="application/json")


def get_manifest(s3, bucket: str, key: str) -> dict:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def read_stream(s3, bucket: str, manifest: dict,
                progress: Callable[[int], None] = lambda done: None) -> Iterator[bytes]:
    """The stream of a manifest, each chunk checked against its SHA-256 before it is
    yielded, and the whole against ``stream_sha256`` at the end."""
    digest, done = hashlib.sha256(), 0
    for chunk in manifest["chunks"]:
        body = s3.get_object(Bucket=bucket, Key=chunk["key"])["Body"].read()
        raw = decode_chunk(body, chunk.get("codec", "zlib"))
        if len(raw) != chunk["bytes"] or hashlib.sha256(raw).hexdigest() != chunk["sha256"]:
            raise ChecksumMismatch(f"chunk {chunk['key']} in bucket {bucket} does not match "
                                   "its checksum: the backup is damaged from here on")
        digest.update(raw)
        done += len(raw)
        progress(done)
        yield raw
    if digest.hexdigest() != manifest["stream_sha256"]:
        raise ChecksumMismatch(f"the stream of {manifest['snapshot']} does not match its "
                               "SHA-256 as a whole")


def delete_prefix(s3, bucket: str, prefix: str) -> int:
    """Delete every object under ``prefix/``; return how many."""
    n = 0
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/"):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])
            n += 1
    return n


def child_prefixes(s3, bucket: str, prefix: str) -> list:
    """The names of the "directories" directly under ``prefix/``."""
    out = []
    paginator = s3.get_paginator("list_objects_v2")
    base = prefix.rstrip("/") + "/"
    for page in paginator.paginate(Bucket=bucket, Prefix=base, Delimiter="/"):
        for cp in page.get("CommonPrefixes", []):
            out.append(cp["Prefix"][len(base):].rstrip("/"))
    return out
