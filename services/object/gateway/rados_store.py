"""The gateway over a RADOS pool: buckets (:mod:`.rados_buckets`), their index in omap
(:mod:`.rados_index`) and object bytes in data objects or inline (:mod:`.rados_data`), shared
by every gateway process connected to the pool, on any node.

:class:`RadosGateway` has the interface of :class:`.core.Gateway` that the request handlers
use (``buckets``, ``commit``, ``store_body``, ``copy_data``, ``open_reader``, ``read``,
``delete_version_or_key``, ``make_record``), so routes, auth, policy, ACLs, CORS, checksums and
errors are the same code for both stores. What this store does not have yet is refused with
501 NotImplemented (:mod:`.rados_routes`), never answered wrong.
There is no group commit, compaction or background job: an OSD op is atomic and durable once
acknowledged.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import rados

from . import rados_data
from .checksums import Digests, requested_algorithms
from .config import ConfigWatcher
from .core import MAX_OBJECT_SIZE, Gateway, Stored, WorkerRole
from .errors import S3Error
from .index import Op, OpResult, Record
from .rados_buckets import RadosBucketStore
from .rados_data import INLINE_LIMIT, ChunkWriter
from .rados_index import dkey
from .shared import next_seq, set_seq_slot

log = logging.getLogger("strata.s3.rados")
DEFAULT_SHARDS = 8

def not_implemented(what: str) -> S3Error:
    return S3Error("NotImplemented", f"{what} is not implemented yet for buckets stored in RADOS "
                   "(a Ceph pool's S3 store); use a bucket on a local pool for it")


def connect(store: dict):
    """(cluster, ioctx) of the store config's pool."""
    conf = {"keyring": store["keyring"]} if store.get("keyring") else {}
    cluster = rados.Rados(conffile=store["ceph_conf"], name=f"client.{store.get('client') or 'admin'}", conf=conf)
    cluster.connect(timeout=30)
    return cluster, cluster.open_ioctx(store["pool"])


class RadosGateway(Gateway):
    """The request handlers' gateway, with buckets in a RADOS pool."""

    kind = "rados"

    def __init__(self, config_path: str, role: WorkerRole | None = None):  # noqa: super().__init__ is the local store's
        self.watcher = ConfigWatcher(config_path)
        store = self.watcher.config["store"]
        self.root = self.watcher.config["data_root"]
        self.role = role
        set_seq_slot(role.slot if role is not None else 0)   # versions' sequence numbers differ per worker
        self.cluster, self.ioctx = connect(store)
        self.buckets = RadosBucketStore(self.ioctx, int(store.get("index_shards") or DEFAULT_SHARDS))
        self.background: list[asyncio.Task] = []
        self.cold = None
        self.io = ThreadPoolExecutor(max_workers=16, thread_name_prefix="s3-rados")

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.io.shutdown(wait=False)
        with contextlib.suppress(rados.Error):
            self.buckets.close()
            self.ioctx.close()
            self.cluster.shutdown()

    def deleting(self, bucket, key: str, version_id: str):
        return contextlib.nullcontext()   # no snapshots hold versions here

    # -- writing ---------------------------------------------------------------------------

    async def commit(self, bucket, op: Op, in_segment: bool | bytes = False) -> OpResult:
        """Apply one index op (``in_segment``: a small body's bytes, stored inline in it);
        the data objects of versions it replaced, or of a put that lost its condition, go
        (a GET that read the entry before retries once, see ``object_ops.get_object``)."""
        data = in_segment if isinstance(in_segment, (bytes, bytearray)) else None
        result = await self.run(bucket.index.apply, op, bytes(data) if data is not None else None)
        gone = [r.loc for r in result.removed if "r" in r.loc]
        if result.precondition and op.record is not None and "mpu" not in op.record.loc:  # (parts stay)
            gone.append(op.record.loc)
        if gone:   # before the answer: a DELETE's 200 means its bytes left the pool
            await self.run(self._remove, gone)
        return result

    def _remove(self, locs: list[dict]) -> None:
        for loc in locs:
            try:
                rados_data.remove(self.ioctx, loc)
            except rados.Error as exc:  # left to the sweep (not built yet): logged
                log.warning("data objects %s left: %s", loc, exc)

    async def store_body(self, bucket, body, headers: dict[str, str], dest_dir: str | None = None,
                         force_file: bool = False, cipher=None, defer: bool = False) -> Stored:
        """Receive a body: inline (kept for the index op) when small and ``defer``, else into
        data objects written before the index names them."""
        if cipher is not None:
            raise not_implemented("server-side encryption")
        size = body.size
        if size is not None and size > MAX_OBJECT_SIZE:
            raise S3Error("EntityTooLarge")
        bucket.check_quota(size or 0, add_objects=0)
        digests = Digests(requested_algorithms(headers), payload_sha256=bool(body.payload_hash))
        if defer and size is not None and size < INLINE_LIMIT and not force_file:
            data = await body.read_all(INLINE_LIMIT)
            digests.update(data)
            checks = digests.verify(headers, body.trailers, body.payload_hash)
            return Stored({"i": 1}, digests.size, digests.md5.hexdigest(), checks, True, data)
        writer = ChunkWriter(self.ioctx, bucket.index.bid)
        try:
            await self._pump(body.stream(), writer, digests)
            checks = digests.verify(headers, body.trailers, body.payload_hash)
            loc = await self.run(writer.finish)
        except BaseException:
            await self.run(writer.abort)
            raise
        return Stored(loc, digests.size, digests.md5.hexdigest(), checks, True)

    async def _pump(self, chunks, writer: ChunkWriter, digests: Digests) -> None:
        """Hash and write blocks on the I/O pool, one job in flight while the next arrive."""
        loop = asyncio.get_running_loop()

        def job(blocks):
            for block in blocks:
                digests.update(block)
            writer.write(blocks)

        pending, blocks, held = None, [], 0
        try:
            async for data in chunks:
                blocks.append(data)
                held += len(data)
                if held >= rados_data.CHUNK:
                    if pending is not None:
                        await pending
                    pending = loop.run_in_executor(self.io, job, blocks)
                    blocks, held = [], 0
            if pending is not None:
                await pending
                pending = None
            await loop.run_in_executor(self.io, job, blocks)
        finally:
            if pending is not None:
                await asyncio.wait([pending])

    async def copy_data(self, bucket, src: Record, start: int = 0, end: int | None = None,
                        dest_dir: str | None = None, force_file: bool = False, cipher=None, src_key=None,
                        algorithms: set[str] = frozenset()) -> Stored:
        """Store a copy of bytes [start, end) of ``src`` in new data objects."""
        if cipher is not None or src_key is not None:
            raise not_implemented("server-side encryption")
        end = src.size if end is None else end
        bucket.check_quota(end - start, add_objects=0)
        digests = Digests(algorithms)
        writer = ChunkWriter(self.ioctx, bucket.index.bid)
        try:
            await self._pump(self.read(src, start, end), writer, digests)
            loc = await self.run(writer.finish)
        except BaseException:
            await self.run(writer.abort)
            raise
        return Stored(loc, end - start, digests.md5.hexdigest(), digests.checksums(), True)

    # -- reading ---------------------------------------------------------------------------

    async def open_reader(self, rec: Record, start: int = 0, end: int | None = None, ckey=None,
                          zero_copy: bool = False):
        """Bytes [start, end) of a version: one body when at most one block, else a stream
        whose first block is read now (a version overwritten and removed meanwhile raises
        FileNotFoundError here, before any header is sent)."""
        end = rec.size if end is None else end
        if "sse" in rec.meta:
            raise not_implemented("server-side encryption")
        if end <= start:
            return b""
        if "i" in rec.loc:
            data = await self.run(self._inline, rec)
            return data[start:end]
        blocks = rados_data.read_blocks(self.ioctx, rados_data.ranges(rec.loc, start, end))
        first = await self.run(next, blocks, b"")
        if end - start <= len(first):
            return first
        return self._rest(first, blocks)

    def _inline(self, rec: Record) -> bytes:
        with rados.ReadOpCtx() as op:
            it, _ = self.ioctx.get_omap_vals_by_keys(op, (dkey(rec.key, rec.seq),))
            self.ioctx.operate_read_op(op, rec.loc["i"])
            data = dict(it).get(dkey(rec.key, rec.seq))
        if data is None:
            raise FileNotFoundError(f"{rec.key} {rec.version_id}")
        return data

    async def _rest(self, first: bytes, blocks):
        yield first
        async for data in self.stream_blocks(blocks, []):
            yield data

    async def read(self, rec: Record, start: int = 0, end: int | None = None, ckey=None):
        reader = await self.open_reader(rec, start, end, ckey)
        if isinstance(reader, (bytes, bytearray)):
            if reader:
                yield reader
            return
        async for data in reader:
            yield data

    # -- helpers ---------------------------------------------------------------------------

    def make_record(self, bucket, key: str, stored: Stored | None, etag: str, meta: dict,
                    marker: bool = False) -> Record:
        seq = next_seq()
        loc = dict(stored.loc) if stored else {}
        if "i" in loc:
            loc["i"] = bucket.index.shard_oid(key)
        return Record(key=key, seq=seq, version_id=self.new_version_id(bucket, seq), latest=True,
                      marker=marker, size=stored.size if stored else 0, etag=etag, mtime=time.time(),
                      tier="hot", loc=loc, meta=meta)


def uses_rados(config: dict) -> bool:
    return (config.get("store") or {}).get("kind") == "rados"
