"""S3 underneath PyTorch DCP's file-system writer and reader (no Django; imports torch and
boto3): a kept boto3 client per gateway, one object written as a stream (one PUT up to
`multipart_threshold`, else a multipart upload whose parts go up in the background), and
`S3FileSystem`, DCP's `FileSystemBase` over one bucket. Also what the S3 writer and reader
share: the version whose prefix they use."""
from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import hashlib
import io
import os
import threading

from torch.distributed.checkpoint.filesystem import FileSystemBase

MiB = 1 << 20


_CLIENTS: dict = {}  # (pid, endpoint, keys, region, ca bundle, pool) -> client
_CLIENTS_LOCK = threading.Lock()
_CLIENTS_KEPT = 8


def s3_client(s3: dict, pool: int):
    """A boto3 client for a Strata gateway whose connection pool fits `pool` threads.

    Kept for the process: making one costs 0.15-0.5 s of CPU (botocore loads and resolves
    the S3 model), which every save would pay again since the SDK hands out a new writer a
    step; botocore clients are safe to share between threads. A forked child makes its own.
    """
    key = (os.getpid(), s3["endpoint"], s3["access_key"], s3["secret_key"], s3.get("region"),
           s3.get("ca_bundle"), pool)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = _new_s3_client(s3, pool)
            while len(_CLIENTS) > _CLIENTS_KEPT:
                _CLIENTS.pop(next(iter(_CLIENTS)))
        return client


def _new_s3_client(s3: dict, pool: int):
    import boto3
    from botocore.config import Config

    # a session of its own: boto3's default session is not safe to share between threads
    return boto3.session.Session().client(
        "s3", endpoint_url=s3["endpoint"], aws_access_key_id=s3["access_key"],
        aws_secret_access_key=s3["secret_key"], region_name=s3.get("region") or "us-east-1",
        verify=s3.get("ca_bundle"),
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                      request_checksum_calculation=_checksums(s3["endpoint"]),
                      max_pool_connections=pool, retries={"max_attempts": 3, "mode": "standard"}))


def _checksums(endpoint: str) -> str:
    """botocore's `request_checksum_calculation` for an endpoint. Over plain http botocore
    signs every body (its SHA-256 is in the signature and the gateway checks it), so its
    default extra CRC32 would only cost one more pass over the bytes on both sides; over
    https it sends the CRC32 instead of signing the body, so keep it there."""
    return "when_required" if endpoint.lower().startswith("http://") else "when_supported"


class StreamingUpload:
    """One object written as a stream, copied once into bytearrays that are the request
    bodies as they are (botocore sends a bytearray in one `sendall` and hashes it in place;
    `bytes` it would wrap in a BytesIO, copy twice more in small reads and send with
    `Expect: 100-continue`). The first buffer holds up to `multipart_threshold` bytes: a
    stream that ends there is one PUT, a longer one becomes a multipart upload whose first
    part is that buffer and whose next parts (`part_size`) upload in the background while
    the stream goes on.

    Not an `io.IOBase` on purpose: garbage collection must never complete an upload; only
    `close()` does (DCP calls it after the last item), and `abort()` on failure.
    """

    DOUBLE_EVERY = 1000  # parts; then the part size doubles (S3 allows 10,000 an object)

    def __init__(self, fs: "S3FileSystem", key: str):
        self.fs, self.key = fs, key
        self.cur = None  # the buffer being filled (a bytearray), up to `cap` bytes
        self.part = fs.part_size
        self.cap = max(fs.multipart_threshold, self.part)
        self.pos = 0
        self.upload_id = None
        self.futures: list = []
        self.slots = threading.BoundedSemaphore(fs.max_concurrency)
        self.sha = hashlib.sha256() if fs.sha256 else None
        self.failed = None  # the first part upload that failed: stop sending more
        self.closed = False

    # the file-like surface DCP and torch.save use
    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        pass

    def write(self, data) -> int:
        # the one copy: torch.save hands memoryviews of memory it reuses after we return
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        if self.sha is not None:
            self.sha.update(mv)
        self.pos += n
        off = 0
        while off < n:
            if self.cur is not None and len(self.cur) >= self.cap:
                full, self.cur, self.cap = self.cur, None, self.part
                self._send(full)  # more follows: a part (the first one starts the upload)
            take = min(self.cap - (len(self.cur) if self.cur is not None else 0), n - off)
            if self.cur is None:
                self.cur = bytearray(mv[off:off + take])  # no zero-filling first
            else:
                self.cur += mv[off:off + take]
            off += take
        return n

    def _send(self, data: bytearray) -> None:
        if self.failed is not None:
            raise self.failed
        s3 = self.fs.s3
        if self.upload_id is None:
            self.upload_id = s3.create_multipart_upload(
                Bucket=self.fs.bucket, Key=self.key)["UploadId"]
        number = len(self.futures) + 1
        self.slots.acquire()  # at most max_concurrency parts of this object in memory
        try:
            fut = self.fs.pool.submit(s3.upload_part, Bucket=self.fs.bucket, Key=self.key,
                                      UploadId=self.upload_id, PartNumber=number, Body=data)
        except BaseException:
            self.slots.release()
            raise
        fut.add_done_callback(self._part_done)
        self.futures.append(fut)
        if len(self.futures) % self.DOUBLE_EVERY == 0:
            self.part *= 2

    def _part_done(self, fut) -> None:
        self.slots.release()
        if not fut.cancelled() and fut.exception() is not None and self.failed is None:
            self.failed = fut.exception()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        s3, bucket = self.fs.s3, self.fs.bucket
        digest = self.sha.hexdigest() if self.sha is not None else None
        if self.pos == 0:
            return  # DCP opens one stream per thread even when a bin is empty: no object
        last, self.cur = self.cur, None
        try:
            if self.upload_id is None:
                extra = {"ChecksumSHA256": base64.b64encode(bytes.fromhex(digest)).decode()
                         } if digest else {}
                s3.put_object(Bucket=bucket, Key=self.key, Body=last, **extra)
            else:
                if last:
                    self._send(last)
                parts = [{"PartNumber": i + 1, "ETag": f.result()["ETag"]}
                         for i, f in enumerate(self.futures)]
                s3.complete_multipart_upload(Bucket=bucket, Key=self.key,
                                             UploadId=self.upload_id,
                                             MultipartUpload={"Parts": parts})
        except BaseException:
            self.abort()
            raise
        self.fs.record(self.key, self.pos, digest)

    def abort(self) -> None:
        self.closed = True
        self.cur = None
        if self.upload_id is None:
            return
        for f in self.futures:
            f.cancel()
        concurrent.futures.wait(self.futures)
        with contextlib.suppress(Exception):
            self.fs.s3.abort_multipart_upload(Bucket=self.fs.bucket, Key=self.key,
                                              UploadId=self.upload_id)


class S3FileSystem(FileSystemBase):
    """DCP's file-system interface over one bucket: paths are object keys.

    `record(key, size, sha256)` keeps what every completed upload wrote, for the manifest.
    """

    def __init__(self, s3: dict, bucket: str, part_size: int = 8 * MiB,
                 max_concurrency: int = 8, streams: int = 1, sha256: bool = False,
                 multipart_threshold: int | None = None):
        self.config, self.bucket = s3, bucket
        self.part_size, self.max_concurrency = part_size, max_concurrency
        # an object up to this size is one PUT: on Strata's gateway (fsync before every
        # answer) create + parts + complete cost more than the parallel parts win back
        self.multipart_threshold = multipart_threshold or 4 * part_size
        self.streams, self.sha256 = streams, sha256
        self.written: dict = {}
        self.errors: list = []  # a failed stream in one of DCP's writer threads
        self._lock = threading.Lock()
        self._s3 = self._pool = None

    @property
    def s3(self):
        with self._lock:
            if self._s3 is None:  # one client: its pool holds every stream and part thread
                self._s3 = s3_client(self.config, self.max_concurrency + self.streams + 2)
            return self._s3

    @property
    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.max_concurrency, thread_name_prefix="strata-s3")
            return self._pool

    def close(self) -> None:
        """End the part threads (the client and its connections stay for the next use)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __getstate__(self):  # async_save in a process pickles the writer: no live clients
        state = dict(self.__dict__)
        state.update(_s3=None, _pool=None, _lock=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state, _lock=threading.Lock())

    def record(self, key: str, size: int, sha256: str | None) -> None:
        with self._lock:
            self.written[key] = (size, sha256)

    # FileSystemBase
    @contextlib.contextmanager
    def create_stream(self, path, mode: str):
        key = str(path)
        if "w" in mode:
            stream = StreamingUpload(self, key)
            try:
                yield stream
                stream.close()
            except BaseException as exc:
                stream.abort()
                self.errors.append(exc)  # DCP's extra writer threads drop their exceptions
                raise
        else:
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"]
            with contextlib.closing(body):
                yield io.BytesIO(body.read())

    def concat_path(self, path, suffix: str) -> str:
        return f"{path}{suffix}" if str(path).endswith("/") else f"{path}/{suffix}"

    def init_path(self, path) -> str:
        return str(path)

    def rename(self, path, new_path) -> None:
        self.s3.copy_object(Bucket=self.bucket, Key=str(new_path),
                            CopySource={"Bucket": self.bucket, "Key": str(path)})
        self.rm_file(path)

    def mkdir(self, path) -> None:
        pass  # prefixes need no making

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return str(checkpoint_id).startswith("s3://")

    def exists(self, path) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=self.bucket, Key=str(path))
            return True
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def rm_file(self, path) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=str(path))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if length == 0:
            return b""
        body = self.s3.get_object(Bucket=self.bucket, Key=key,
                                  Range=f"bytes={start}-{start + length - 1}")["Body"]
        with contextlib.closing(body):
            data = body.read()
        if len(data) != length:
            raise OSError(f"s3://{self.bucket}/{key}: asked {length} bytes at {start}, "
                          f"got {len(data)}")
        return data


def require_s3(client, version) -> dict:
    """The S3 settings of the SDK `client` for `version`, which must have an S3 prefix."""
    if not version.s3_prefix:
        raise ValueError(f"version {version.job}@{version.step} has no S3 prefix: give the job "
                         "a bucket, or write through its directory")
    s3 = client.s3_config()
    if not s3:
        raise ValueError("no S3 credentials: pass CheckpointClient(..., s3={'endpoint', "
                         "'access_key', 'secret_key'}) or set STRATA_S3_ENDPOINT, "
                         "STRATA_S3_ACCESS_KEY and STRATA_S3_SECRET_KEY")
    return s3


class S3Version:
    """What the S3 writer and reader share: the version's prefix is their checkpoint id."""

    @property
    def checkpoint_id(self) -> str:
        return self.version.s3_prefix

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return S3FileSystem.validate_checkpoint_id(checkpoint_id)

    def _own_version(self, checkpoint_id, what: str) -> None:
        if checkpoint_id and str(checkpoint_id) != self.version.s3_prefix:
            raise ValueError(f"{what}; pass no checkpoint_id")
