"""The gateway's state and the paths every handler shares: store a body, read an object,
remove a version.

:meth:`Gateway.store_body` puts a body below ``SMALL_OBJECT_LIMIT`` in a segment (bytes kept
in memory, appended, made durable by the group commit), and streams anything larger into its
own file, created in place, through a worker thread (hashing and writing off the event loop
while the next block arrives, never the whole body in memory; the last block's job fsyncs).
:meth:`Gateway.read` streams an object back. :meth:`Gateway.delete_version_or_key` is the one
removal of a version or key (S3 deletes and lifecycle expiration), past the snapshot holds.

This is the top of the store (buckets, index, segments and files, group commit, lifecycle,
snapshots, tiers); the request handlers (:mod:`.app`, the ``*_ops`` modules, :mod:`.multipart`,
:mod:`.admin`) sit on it, and nothing here imports them.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import AsyncIterator, Iterator, Protocol

from plumbing.workclass import thread_joiner

from .admission import REQUEST_CLASS
from .buckets import Bucket, BucketStore
from .checksums import Digests, requested_algorithms
from .commit import GATHER_SECONDS, GroupCommitter
from .compaction import INTERVAL_SECONDS, collect_all_orphans, compaction_loop
from .lifecycle import abort_stale_uploads, lifecycle_loop
from .config import ConfigWatcher
from .errors import S3Error
from .index import Op, OpResult, Record, shards_for_workers
from .shared import MAX_WORKERS, FileLock, Generation, SeqFloors, next_seq, run_dir, set_seq_slot
from .snapshots import deleting_version
from . import objectlock, sse, watch
from .tiers import ColdTier, read_loc
from .storage import (READ_BLOCK, SEGMENT_SIZE, SMALL_OBJECT_LIMIT, LargeFileWriter, SegmentStore, file_ranges,
                      open_pieces, read_open_pieces, read_pieces, reset_tmp)

log = logging.getLogger("strata.s3")
WRITE_BLOCK = 1024 * 1024
MAX_OBJECT_SIZE = 5 * 1024 ** 4


class BodySource(Protocol):
    """What :meth:`Gateway.store_body` reads a request body through (:class:`.body.Body`)."""

    size: int | None
    trailers: dict[str, str]
    payload_hash: str | None

    async def read_all(self, limit: int) -> bytes: ...

    def stream(self) -> AsyncIterator[bytes]: ...


@dataclass
class WorkerRole:
    """This process is worker ``slot`` of several on one port (:mod:`.workers`); the parent
    started at ``started`` (and emptied ``tmp/`` then). Slot 0 runs the background jobs."""

    slot: int
    started: float | None = None
    workers: int = 1      # how many worker processes serve the port


MAINTENANCE_SECONDS = 5.0


ZERO_COPY_MIN = 64 * 1024  # smaller ranges are read at once: one thread hop, not two


class OpenFiles:
    """A response body of opened file pieces, sent by the server without reading them
    (``http.response.zerocopysend``); ``close`` when sent."""

    __slots__ = ("handles",)

    def __init__(self, handles: list):
        self.handles = handles   # [(file object, offset, length)]

    def close(self) -> None:
        for fh, _, _ in self.handles:
            fh.close()


@dataclass
class Stored:
    """Where a body went and what it hashed to."""

    loc: dict
    size: int
    md5_hex: str
    checksums: dict
    in_segment: bool
    data: bytes | None = None   # a deferred small body: appended by the commit (loc is empty)

    @property
    def commit_data(self) -> bool | bytes:
        """What :meth:`Gateway.commit` takes of these bytes: the deferred body, or whether
        they are in a segment."""
        return self.data if self.data is not None else self.in_segment


class Gateway:
    """Everything a request handler needs: config, buckets, segments, committer, I/O threads.
    This is the local store (a data root on a file system); :func:`.stores.open_gateway` picks
    it or :class:`.rados_store.RadosGateway` from the config."""

    kind = "local"
    no_tier: str | None = None   # why the store can have no capacity tier (None: it depends on cold_root)

    def __init__(self, config_path: str, role: WorkerRole | None = None):
        self.watcher = ConfigWatcher(config_path)
        root = self.watcher.config["data_root"]
        os.makedirs(root, exist_ok=True)
        self.root = root
        self.role = role
        # files older than this belong to no PUT in flight
        self.started = role.started if role is not None and role.started else time.time()
        self.floors = SeqFloors(root, role.slot if role is not None else 0)
        set_seq_slot(role.slot if role is not None else 0)
        if role is None:  # serving alone: what the parent of several workers does once
            reset_tmp(root)
            self.floors.reset(MAX_WORKERS)
            Generation.restart(root)
        # one lifecycle pass, one compaction at a time, whichever process asks
        self.lifecycle_lock = FileLock(os.path.join(run_dir(root), "lifecycle.lock"))
        self.compaction_lock = FileLock(os.path.join(run_dir(root), "compaction.lock"))
        workers = role.workers if role is not None else 1
        self.buckets = BucketStore(root, int(self.watcher.config.get("index_shards") or shards_for_workers(workers)))
        self.segments = SegmentStore(root, int(self.watcher.config.get("segment_bytes") or SEGMENT_SIZE))
        self.background: list[asyncio.Task] = []
        self.committer: GroupCommitter | None = None
        self.notifier: watch.Notifier | None = None   # inotify of the config and the generation
        self.io = ThreadPoolExecutor(max_workers=16, thread_name_prefix="s3-io")
        # direct writes of large bodies (never waits on self.io, so jobs on self.io may wait on it)
        self.disk = ThreadPoolExecutor(max_workers=8, thread_name_prefix="s3-disk")
        self.class_io: dict[str, ThreadPoolExecutor] = {}    # see io_for
        self.cold = ColdTier(self)

    @property
    def config(self) -> dict:
        return self.watcher.current()

    @property
    def keyring(self) -> sse.Keyring:
        """The master key and KMS key ids of the config in force (see :mod:`.sse`)."""
        config = self.config
        if getattr(self, "_keyring_of", None) is not config:
            self._keyring, self._keyring_of = sse.Keyring(config), config
        return self._keyring

    async def start(self) -> None:
        """Start background tasks (call on the serving event loop)."""
        gather_ms = self.config.get("commit_gather_ms")
        self.committer = GroupCommitter(self.segments, self.floors,
                                        GATHER_SECONDS if gather_ms is None else gather_ms / 1000)
        self.committer.start()
        loop = asyncio.get_running_loop()
        self.notifier = watch.start(loop)
        self.watcher.watch(self.notifier)
        self.buckets.generation.watch(self.notifier)
        self.background.append(loop.create_task(self._maintain()))
        if self.role is not None and self.role.slot != 0:
            return  # worker 0 runs the background jobs
        interval = float(self.config.get("compaction_interval") or INTERVAL_SECONDS)
        self.background.append(asyncio.get_running_loop().create_task(compaction_loop(self, interval)))
        # crash leftovers: once per start, in the background
        self.background.append(asyncio.get_running_loop().create_task(
            collect_all_orphans(self, delay=5.0, started=self.started)))
        interval = float(self.config.get("lifecycle_interval", 3600))
        if interval > 0:  # 0: the plane runs the passes (as Jobs)
            self.background.append(asyncio.get_running_loop().create_task(lifecycle_loop(self, interval)))

    async def stop(self) -> None:
        """Stop background tasks."""
        for task in self.background:
            task.cancel()
        if self.committer:
            await self.committer.stop()
        if self.notifier is not None:
            self.watcher.watch(None)   # checked on every request again
            self.buckets.generation.watch(None)
            self.notifier.close()
            self.notifier = None
        self.io.shutdown(wait=False)
        self.disk.shutdown(wait=False)
        for pool in self.class_io.values():
            pool.shutdown(wait=False)

    async def _maintain(self) -> None:
        """Every few seconds: drop cached read handles of segments another process removed,
        and publish this process's sequence floor again (a put that took a sequence number
        and failed before it was queued leaves it too low)."""
        while True:
            await asyncio.sleep(MAINTENANCE_SECONDS)
            try:
                self.segments.drop_removed()
                self.committer.update_floor()
            except Exception:  # noqa: BLE001 - try again next time; the log says why
                log.exception("gateway maintenance failed")

    def deleting(self, bucket: Bucket, key: str, version_id: str):
        """The guard around removing one version (snapshot holds, see :mod:`.snapshots`)."""
        return deleting_version(self, bucket, key, version_id)

    def io_for(self, work_class: str) -> ThreadPoolExecutor:
        """The pool that hashes and writes a body of ``work_class``: ``self.io`` for the
        gateway's own class, else a pool whose threads sit in that class's cpu group
        (:mod:`.admission`); ``self.io`` too where there are no such groups."""
        pool = self.class_io.get(work_class)
        if pool is None:
            join = thread_joiner(work_class)
            pool = self.io if join is None else ThreadPoolExecutor(
                max_workers=16, thread_name_prefix=f"s3-{work_class[:4]}", initializer=join)
            self.class_io[work_class] = pool
        return pool

    async def run(self, fn, *args):
        """Run blocking ``fn(*args)`` on the I/O thread pool."""
        return await asyncio.get_running_loop().run_in_executor(self.io, fn, *args)

    async def commit(self, bucket: Bucket, op: Op, in_segment: bool | bytes = False) -> OpResult:
        """Durably apply one index op (group-committed with concurrent ones); ``in_segment``:
        whether its bytes are in a segment, or the deferred body to append there
        (:attr:`Stored.commit_data`)."""
        return await self.committer.commit(bucket.index, op, in_segment)

    # -- writing ---------------------------------------------------------------------------

    async def store_body(self, bucket: Bucket, body: BodySource, headers: dict[str, str],
                         dest_dir: str | None = None, force_file: bool = False,
                         cipher: sse.ChunkCipher | None = None, defer: bool = False) -> Stored:
        """Receive and durably store a body (not yet visible: the caller commits the index);
        with a ``cipher`` the bytes are stored encrypted (:mod:`.sse`). ``defer``: a small
        body is not appended here but kept in ``Stored.data``, for :meth:`commit` (given
        ``Stored.commit_data``) to append with the rest of its batch, in one write off the
        event loop."""
        size = body.size
        if size is not None and size > MAX_OBJECT_SIZE:
            raise S3Error("EntityTooLarge")
        bucket.check_quota(size or 0, add_objects=0)
        digests = Digests(requested_algorithms(headers), payload_sha256=bool(body.payload_hash))
        if size is not None and size < SMALL_OBJECT_LIMIT and not force_file:
            data = await body.read_all(SMALL_OBJECT_LIMIT)
            digests.update(data)
            checks = digests.verify(headers, body.trailers, body.payload_hash)
            if cipher:
                data = cipher.seal_all(data)
            if defer:
                return Stored({}, digests.size, digests.md5.hexdigest(), checks, True, data)
            return Stored(self.segments.append(data), digests.size, digests.md5.hexdigest(), checks, True)
        writer = LargeFileWriter(self.root, dest_dir or bucket.data_dir, in_place=True, pool=self.disk)
        try:
            await self._pump(body.stream(), writer, digests, size, cipher)
            checks = digests.verify(headers, body.trailers, body.payload_hash)
        except BaseException:
            await self.run(writer.abort)
            raise
        return Stored({"file": writer.path}, digests.size, digests.md5.hexdigest(), checks, False)

    async def _pump(self, chunks: AsyncIterator[bytes], writer: LargeFileWriter, digests: Digests,
                    size: int | None, cipher: sse.ChunkCipher | None = None) -> None:
        """Hash and write ``chunks`` on the I/O pool, about WRITE_BLOCK at a time, while the
        next block arrives (at most one block in flight); the last block's job also fsyncs,
        so a body of one block costs one thread hop. The received buffers are passed as they
        are (no joining copy): hashed one by one, then written (:class:`LargeFileWriter`)."""
        loop = asyncio.get_running_loop()
        pool = self.io_for(REQUEST_CLASS.get())

        def job(blocks: list, last: bool) -> None:
            for block in blocks:
                digests.update(block)
            if cipher is not None:
                blocks = [c for block in blocks for c in cipher.update(block)]
                if last:
                    blocks += cipher.final()
            writer.write_blocks(blocks, last)
            if last:
                writer.sync()

        pending = None
        blocks: list = []
        held = total = 0
        try:
            async for data in chunks:
                blocks.append(data)
                held += len(data)
                total += len(data)
                last = size is not None and total >= size
                if held >= WRITE_BLOCK or last:
                    if pending is not None:
                        await pending
                    pending = loop.run_in_executor(pool, job, blocks, last)
                    blocks, held = [], 0
            if pending is not None:
                await pending
                pending = None
            if not writer.synced:
                await loop.run_in_executor(pool, job, blocks, True)
        finally:
            if pending is not None:  # an error while a job runs: let it end before any abort
                await asyncio.wait([pending])

    async def copy_data(self, bucket: Bucket, src: Record, start: int = 0, end: int | None = None,
                        dest_dir: str | None = None, force_file: bool = False,
                        cipher: sse.ChunkCipher | None = None, src_key: sse.CustomerKey | None = None,
                        algorithms: set[str] = frozenset()) -> Stored:
        """Durably store a copy of bytes [start, end) of ``src`` (for CopyObject / UploadPartCopy),
        encrypted with ``cipher`` if given; ``src_key``: the source's SSE-C key; ``algorithms``:
        checksums to compute over the copied bytes."""
        end = src.size if end is None else end
        length = end - start
        bucket.check_quota(length, add_objects=0)
        digests = Digests(algorithms)
        if length < SMALL_OBJECT_LIMIT and not force_file:
            data = b"".join([c async for c in self.read(src, start, end, src_key)])
            digests.update(data)
            loc = self.segments.append(cipher.seal_all(data) if cipher else data)
            return Stored(loc, length, digests.md5.hexdigest(), digests.checksums(), True)
        writer = LargeFileWriter(self.root, dest_dir or bucket.data_dir, in_place=True, pool=self.disk)
        try:
            await self._pump(self.read(src, start, end, src_key), writer, digests, length, cipher)
        except BaseException:
            await self.run(writer.abort)
            raise
        return Stored({"file": writer.path}, length, digests.md5.hexdigest(), digests.checksums(), False)

    # -- reading ---------------------------------------------------------------------------

    async def open_reader(self, rec: Record, start: int = 0, end: int | None = None,
                          ckey: sse.CustomerKey | None = None,
                          zero_copy: bool = False) -> bytes | AsyncIterator[bytes] | OpenFiles:
        """Open an object's bytes [start, end) now (so a concurrent overwrite that removes the
        old files cannot break a response whose headers are already sent) and stream them
        (decrypted, with the customer's key ``ckey`` for SSE-C); a plaintext range of at most
        one block comes read already (one response body, no stream). ``zero_copy``: the
        caller can send files as they are (``sendfile``), so plaintext ranges of files of at
        least ZERO_COPY_MIN come as :class:`OpenFiles`, unread."""
        end = rec.size if end is None else end
        if end <= start:
            return self.read(rec, start, end)
        loc = read_loc(rec)  # a cold version's restored copy, if it has one
        if "sse" in rec.meta:
            return await sse.open_decrypting(self, rec, loc, start, end, ckey)
        if "seg" in loc:
            # small reads are page-cache hits as a rule: a thread hop (and GIL hand-off) costs more
            return self.segments.read(loc, rec.size, start, end - start)
        pieces = file_ranges(loc, rec.size, start, end)
        if zero_copy and end - start >= ZERO_COPY_MIN:
            return OpenFiles(await self.run(open_pieces, pieces))
        if end - start <= READ_BLOCK:  # one block: opened and read in one thread hop, one body
            return await self.run(read_pieces, pieces)
        handles = await self.run(open_pieces, pieces)
        return self._stream_handles(handles)

    def _stream_handles(self, handles) -> AsyncIterator[bytes]:
        return self.stream_blocks(read_open_pieces(handles), [fh for fh, _, _ in handles])

    async def stream_blocks(self, blocks: Iterator[bytes], files: list) -> AsyncIterator[bytes]:
        """What the blocking iterator ``blocks`` gives, each block read on a worker thread;
        the open ``files`` it reads are closed once it ends or the reader stops."""
        sentinel = object()
        try:
            while True:
                data = await self.run(next, blocks, sentinel)
                if data is sentinel:
                    return
                yield data
        finally:
            for fh in files:
                fh.close()

    async def read(self, rec: Record, start: int = 0, end: int | None = None,
                   ckey: sse.CustomerKey | None = None) -> AsyncIterator[bytes]:
        """Object bytes [start, end), in blocks (whatever tier the object is on)."""
        end = rec.size if end is None else end
        if end <= start:
            return
        loc = read_loc(rec)
        if "seg" in loc and "sse" not in rec.meta:
            yield self.segments.read(loc, rec.size, start, end - start)
            return
        reader = await self.open_reader(rec, start, end, ckey)
        if isinstance(reader, bytes):
            yield reader
            return
        async for data in reader:
            yield data

    # -- removing ---------------------------------------------------------------------------

    async def delete_version_or_key(self, bucket: Bucket, key: str, version_id: str | None,
                                    bypass_governance: bool = False) -> dict:
        """Delete one version, or add a delete marker / drop the null version; returns the
        S3 result fields (VersionId, DeleteMarker, DeleteMarkerVersionId). A version under
        Object Lock retention or legal hold stays (``AccessDenied``, see :mod:`.objectlock`)."""
        if version_id is not None:
            existing = bucket.index.get(key, version_id)
            if version_id != "null" and existing is None and not _valid_version_id(version_id):
                raise S3Error("InvalidArgument", "Invalid version id specified", ArgumentName="versionId")
            objectlock.check_delete(existing, bypass_governance)
            async with self.deleting(bucket, key, version_id):  # a snapshot's versions stay
                res = await self.commit(bucket, Op("delete_version", key=key, version_id=version_id))
            was_marker = bool(res.removed and res.removed[0].marker)
            return {"VersionId": version_id, "DeleteMarker": was_marker}
        if not bucket.versioning:
            await self.commit(bucket, Op("delete_version", key=key, version_id="null"))
            return {}
        rec = self.make_record(bucket, key, None, "", {}, marker=True)
        await self.commit(bucket, Op("put", rec, versioned=bucket.versioning == "Enabled"))
        return {"DeleteMarker": True, "DeleteMarkerVersionId": rec.version_id}

    def abort_stale_uploads(self, bucket: Bucket, prefix: str, older_than: float) -> int:
        """Remove the multipart uploads of keys under ``prefix`` initiated before ``older_than``
        (blocking; the lifecycle's AbortIncompleteMultipartUpload); how many went."""
        return abort_stale_uploads(bucket, prefix, older_than)

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def new_version_id(bucket: Bucket, seq: int) -> str:
        """A fresh version id when versioning is Enabled, else S3's literal 'null'."""
        if bucket.versioning == "Enabled":
            return f"{seq:019d}.{uuid.uuid4().hex[:8]}"
        return "null"

    def make_record(self, bucket: Bucket, key: str, stored: Stored | None, etag: str, meta: dict,
                    marker: bool = False) -> Record:
        """A new latest version of ``key``."""
        self.committer.before_seq()
        seq = next_seq()
        return Record(key=key, seq=seq, version_id=self.new_version_id(bucket, seq), latest=True,
                      marker=marker, size=stored.size if stored else 0, etag=etag, mtime=time.time(),
                      tier="hot", loc=stored.loc if stored else {}, meta=meta)


def _valid_version_id(vid: str) -> bool:
    head, _, tail = vid.partition(".")
    return head.isdigit() and len(tail) == 8


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
