"""PyTorch DCP storage on a Strata checkpoint version (no Django; imports torch and boto3).

The SDK (`sdk.CheckpointClient.dcp_writer` / `dcp_reader`) hands these out; both pick the
version's directory when it has one and its S3 prefix otherwise (`via="path"|"s3"` forces).

- `StrataStorageWriter` (path): a `FileSystemWriter` on the version's directory.
- `StrataS3StorageWriter` (S3): DCP's `FileSystemWriter` logic (per-rank plans, items of a
  rank split over `thread_count` streams by size, each stream one object holding many
  tensors back to back) with S3 underneath: a stream of at most `multipart_threshold`
  (default four parts) is one PUT, a longer one a multipart upload whose parts
  (`part_size`, default 8 MiB) go up from a shared thread pool (`max_concurrency`) while
  the stream goes on. The bytes are copied once, into the request bodies. A save of many small
  tensors is therefore `ranks x thread_count` objects plus `.metadata`, and `.metadata`
  maps every item to `_StorageInfo(object name, offset, length)` exactly as on a file
  system (Strata's scanner reads it the same way).
- Both writers commit in `finish()` on the coordinator: `.metadata` is written last, then
  the catalog verifies the manifest (every object's size; its sha256 with `sha256=True`)
  and only then moves `latest`. A save that dies earlier leaves the version `writing`.
- `StrataStorageReader` (path) / `StrataS3StorageReader` (S3) hold a lease on the version
  (released by `close()` or `with`). The S3 reader groups the items it must load by
  object, merges neighbouring extents, fetches them with ranged GETs in parallel (a large
  extent in `part_size` pieces) and hands each item to the planner, so a checkpoint saved
  by N ranks loads with any world size (DCP's planner does the resharding).

Everything here works with `dcp.save`, `dcp.async_save` (the writers are
`BlockingAsyncStager`s like `FileSystemWriter`) and `dcp.load`.
"""
from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import hashlib
import io
import os
import pickle
import threading
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystemBase, _StorageInfo
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from services.checkpoints.s3source import parse_prefix
from services.checkpoints.sdkerrors import StrataError

MiB = 1 << 20
METADATA = ".metadata"


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


# -- S3 underneath DCP's file-system writer/reader -------------------------------------------

class _Upload:
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
            stream = _Upload(self, key)
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


class _Extent:
    """What a rank's WriteResult carries to the coordinator: the DCP storage info, plus the
    size and sha256 of the whole object it lies in (for the manifest)."""

    def __init__(self, info: _StorageInfo, object_size: int, sha256: str | None):
        self.info, self.object_size, self.sha256 = info, object_size, sha256


def _require_s3(client, version) -> dict:
    if not version.s3_prefix:
        raise ValueError(f"version {version.job}@{version.step} has no S3 prefix: give the job "
                         "a bucket, or write through its directory")
    s3 = client.s3_config()
    if not s3:
        raise ValueError("no S3 credentials: pass CheckpointClient(..., s3={'endpoint', "
                         "'access_key', 'secret_key'}) or set STRATA_S3_ENDPOINT, "
                         "STRATA_S3_ACCESS_KEY and STRATA_S3_SECRET_KEY")
    return s3


# -- writers ----------------------------------------------------------------------------------

class StrataStorageWriter(FileSystemWriter):
    """FileSystemWriter into a Strata version's directory; commits it in finish()."""

    def __init__(self, client, job: str, step: int, version=None, **kwargs):
        self.strata = client
        self.version = version or client.begin(job, step)  # every rank joins one version
        if not self.version.path:
            raise ValueError(f"job {job} has no file system: write through S3 (via='s3')")
        super().__init__(self.version.path, **kwargs)

    def finish(self, metadata, results) -> None:
        super().finish(metadata, results)
        extents: dict = {}
        for rank_results in results:
            for wr in rank_results:
                info = wr.storage_data
                end = info.offset + info.length
                extents[info.relative_path] = max(extents.get(info.relative_path, 0), end)
        manifest = [{"name": n, "size": s} for n, s in sorted(extents.items())]
        meta = os.path.join(self.version.path, METADATA)
        manifest.append({"name": METADATA, "size": os.path.getsize(meta)})
        self.version = self.strata.commit(self.version, manifest, location="path")


class _S3Version:
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


class StrataS3StorageWriter(_S3Version, FileSystemWriter):
    """DCP writer into a Strata version's S3 prefix (see the module docstring)::

        dcp.save(state, storage_writer=client.dcp_writer("llm", step, via="s3"))

    `thread_count` objects per rank (streams written in parallel), `part_size` bytes a
    multipart part, `max_concurrency` parts in flight (the thread pool and the size of the
    boto3 connection pool), `multipart_threshold` the largest object sent as one PUT
    (default four parts), `sha256` adds each object's digest to the manifest (the
    catalog then checks it: from the gateway's stored checksum for single-PUT objects, by
    reading the object for multipart ones).
    """

    def __init__(self, client, job: str, step: int, version=None, thread_count: int = 2,
                 part_size: int = 8 * MiB, max_concurrency: int = 8, sha256: bool = False,
                 multipart_threshold: int | None = None, **kwargs):
        if part_size < 5 * MiB:
            raise ValueError("part_size must be at least 5 MiB (S3's smallest part)")
        self.strata = client
        self.version = version or client.begin(job, step)  # every rank joins one version
        s3 = _require_s3(client, self.version)
        bucket, prefix = parse_prefix(self.version.s3_prefix)
        kwargs.setdefault("sync_files", False)  # a completed upload is durable; no fsync
        super().__init__(prefix, thread_count=thread_count, **kwargs)
        self.fs = S3FileSystem(s3, bucket, part_size=part_size, max_concurrency=max_concurrency,
                               streams=thread_count, sha256=sha256,
                               multipart_threshold=multipart_threshold)
        self.fs.s3  # noqa: B018 - make the client now (a rank's start-up), not in the middle of the save
        self.path = prefix
        self.prefix = prefix

    def _metadata_exists(self) -> bool:
        # with `overwrite` (DCP's default) the answer only chose whether to warn: spare every
        # rank a round trip before its first byte
        return False if self.overwrite else super()._metadata_exists()

    def reset(self, checkpoint_id=None) -> None:
        self._own_version(checkpoint_id, "a Strata writer writes its own version")
        super().reset(None)
        self.fs.written.clear()

    def write_data(self, plan, planner) -> Future:
        self.fs.errors.clear()
        try:
            results = super().write_data(plan, planner).wait()
        finally:
            self.fs.close()  # the part threads end with the rank's writes
        if self.fs.errors:
            raise self.fs.errors[0]
        missing = len({i.index for i in plan.items} - {wr.index for wr in results})
        if missing:  # never let a short result list become a .metadata without them
            raise RuntimeError(f"{missing} DCP items were not written to S3")
        out = []
        for wr in results:
            info = wr.storage_data
            size, digest = self.fs.written[self.prefix + info.relative_path]
            out.append(WriteResult(index=wr.index, size_in_bytes=wr.size_in_bytes,
                                   storage_data=_Extent(info, size, digest)))
        fut: Future = Future()
        fut.set_result(out)
        return fut

    def finish(self, metadata, results) -> None:
        objects: dict = {}
        storage: dict = {}
        for rank_results in results:
            for wr in rank_results:
                ext = wr.storage_data
                storage[wr.index] = ext.info
                objects[ext.info.relative_path] = (ext.object_size, ext.sha256)
        metadata.version = "1.0.0"
        metadata.storage_data = storage
        metadata.storage_meta = StorageMeta(checkpoint_id=self.checkpoint_id,
                                            save_id=self.save_id)
        data = pickle.dumps(metadata)
        # .metadata last, in one PUT: S3 makes it visible whole or not at all
        self.fs.s3.put_object(Bucket=self.fs.bucket, Key=self.prefix + METADATA, Body=data)
        manifest = []
        for name, (size, digest) in sorted(objects.items()):
            manifest.append({"name": name, "size": size, **({"sha256": digest} if digest else {})})
        entry = {"name": METADATA, "size": len(data)}
        if self.fs.sha256:
            entry["sha256"] = hashlib.sha256(data).hexdigest()
        manifest.append(entry)
        self.fs.close()
        self.version = self.strata.commit(self.version, manifest, location="s3")


# -- readers ----------------------------------------------------------------------------------

class _LeasedReader:
    """A lease on the version being read (waiting for its pre-warm with a progress bar on
    stderr unless `progress` is False or a callable); `close()` (or `with`) releases it."""

    def _take_lease(self, client, job: str, version, ttl_seconds: int, progress):
        self.strata = client
        version = version or client.latest(job)
        if version is None:
            raise StrataError(404, {"error": "not_found",
                                    "detail": f"checkpoint job {job} has no committed version"})
        self.lease = client.lease(version, ttl_seconds=ttl_seconds, progress=progress)
        self.version = client.version(job, version.id)

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class StrataStorageReader(_LeasedReader, FileSystemReader):
    """FileSystemReader on a leased Strata version's directory."""

    def __init__(self, client, job: str, version=None, ttl_seconds: int = 3600,
                 progress=True, **kwargs):
        self._take_lease(client, job, version, ttl_seconds, progress)
        FileSystemReader.__init__(self, self.version.path, **kwargs)


class StrataS3StorageReader(_S3Version, _LeasedReader, FileSystemReader):
    """DCP reader of a leased Strata version's S3 prefix by ranged GETs.

    Extents of one object closer than `merge_gap` are fetched as one range (up to
    `max_range` bytes); larger extents are fetched in `part_size` pieces; `max_concurrency`
    GETs at a time.
    """

    def __init__(self, client, job: str, version=None, ttl_seconds: int = 3600,
                 progress=True, part_size: int = 8 * MiB, max_concurrency: int = 8,
                 merge_gap: int = 1 * MiB, max_range: int = 32 * MiB, **kwargs):
        self._take_lease(client, job, version, ttl_seconds, progress)
        try:
            s3 = _require_s3(client, self.version)
        except BaseException:
            _LeasedReader.close(self)
            raise
        bucket, prefix = parse_prefix(self.version.s3_prefix)
        FileSystemReader.__init__(self, prefix, **kwargs)
        self.fs = S3FileSystem(s3, bucket, part_size=part_size, max_concurrency=max_concurrency)
        self.fs.s3  # noqa: B018 - the client now, before the load starts
        self.path = prefix
        self.prefix = prefix
        self.merge_gap, self.max_range = merge_gap, max_range

    def reset(self, checkpoint_id=None) -> None:
        self._own_version(checkpoint_id, "a Strata reader reads its own version")
        super().reset(None)

    def close(self) -> None:
        self.fs.close()
        super().close()

    def _ranges(self, plan) -> list:
        """[(object name, start, length, [read items])] covering every item of `plan`."""
        per_object: dict = {}
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            per_object.setdefault(info.relative_path, []).append((info.offset, info.length, item))
        ranges = []
        for name, extents in per_object.items():
            extents.sort(key=lambda e: e[0])
            cur = None
            for off, length, item in extents:
                if cur and off - (cur[1] + cur[2]) <= self.merge_gap \
                        and off + length - cur[1] <= self.max_range:
                    cur[2] = max(cur[2], off + length - cur[1])
                    cur[3].append(item)
                else:
                    cur = [name, off, length, [item]]
                    ranges.append(cur)
        return ranges

    def _fetch(self, name: str, start: int, length: int) -> memoryview:
        key, part = self.prefix + name, self.fs.part_size
        if length <= part:
            return memoryview(self.fs.get_range(key, start, length))
        out = bytearray(length)  # a large extent: pieces in parallel into one buffer

        def piece(off):
            n = min(part, length - off)
            out[off:off + n] = self.fs.get_range(key, start + off, n)

        pieces = [self.fs.pool.submit(piece, off) for off in range(0, length, part)]
        for f in pieces:
            f.result()
        return memoryview(out)

    def read_data(self, plan, planner) -> Future:
        ranges = iter(self._ranges(plan))
        window = 2 * self.fs.max_concurrency  # ranges fetched or waiting: bounds the memory
        # range fetches run in their own threads; pieces of a large one use the part pool
        with concurrent.futures.ThreadPoolExecutor(
                self.fs.max_concurrency, thread_name_prefix="strata-get") as fetchers:
            pending: dict = {}

            def fill():
                for name, start, length, items in ranges:
                    pending[fetchers.submit(self._fetch, name, start, length)] = (start, items)
                    if len(pending) >= window:
                        return

            fill()
            while pending:
                done, _ = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in done:
                    start, items = pending.pop(fut)
                    buf = fut.result()
                    for item in items:  # the planner is driven from this one thread
                        self._load_item(planner, item, buf, start)
                    del buf
                fill()
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _load_item(self, planner, req, buf: memoryview, start: int) -> None:
        info = self.storage_data[req.storage_index]
        raw = io.BytesIO(buf[info.offset - start:info.offset - start + info.length])
        stream = self.transforms.transform_load_stream(req, info.transform_descriptors or (), raw)
        if req.type == LoadItemType.BYTE_IO:
            planner.load_bytes(req, io.BytesIO(stream.read(-1)))
            return
        if not stream.seekable():
            stream = io.BytesIO(stream.read(-1))
        tensor = torch.load(stream, map_location="cpu", weights_only=True)
        tensor = narrow_tensor_by_index(tensor, req.storage_offsets, req.lengths)
        target = planner.resolve_tensor(req).detach()
        if target.size() != tensor.size():
            raise AssertionError(f"req {req.storage_index} mismatch sizes "
                                 f"{target.size()} vs {tensor.size()}")
        target.copy_(tensor)
        planner.commit_tensor(req, target)


def storage_writer(client, job: str, step: int, via: str = "", **kwargs) -> Any:
    """The writer of (job, step): through the version's directory when it has one, else S3."""
    if via not in ("", "path", "s3"):
        raise ValueError("via is 'path' or 's3'")
    version = client.begin(job, step)  # every rank joins the same version
    if via == "s3" or (not via and not version.path):
        return StrataS3StorageWriter(client, job, step, version=version, **kwargs)
    return StrataStorageWriter(client, job, step, version=version, **kwargs)


def storage_reader(client, job: str, version=None, via: str = "", **kwargs) -> Any:
    """The reader of a version (latest by default), from where it was committed."""
    if via not in ("", "path", "s3"):
        raise ValueError("via is 'path' or 's3'")
    if not via and version is None:
        version = client.latest(job)
    if not via and version is not None:
        location = version.raw.get("location") or client.version(job, version.id).raw.get(
            "location")
        via = "s3" if location == "s3" or not version.path else "path"
    if via == "s3":
        return StrataS3StorageReader(client, job, version, **kwargs)
    return StrataStorageReader(client, job, version, **kwargs)
