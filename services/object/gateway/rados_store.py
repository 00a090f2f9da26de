"""The gateway over a RADOS pool: buckets (:mod:`.rados_buckets`), their index in omap
(:mod:`.rados_index`) and object bytes in data objects or inline (:mod:`.rados_data`), shared
by every gateway process connected to the pool, on any node.

:class:`RadosGateway` has the interface of :class:`.core.Gateway` that the request handlers
use (``buckets``, ``commit``, ``store_body``, ``copy_data``, ``open_reader``, ``read``,
``delete_version_or_key``, ``make_record``), so routes, auth, policy, ACLs, CORS, checksums,
server-side encryption (:mod:`.sse`: a cipher given to ``store_body``/``copy_data`` seals
what goes into the data objects or inline; ``open_reader`` opens what it reads) and errors
are the same code for both stores. What this store does not have yet is refused with
501 NotImplemented (:mod:`.rados_routes`), never answered wrong.
There is no group commit or compaction: an OSD op is atomic and durable once acknowledged.
The background jobs are the lifecycle pass (:mod:`.lifecycle`) and the sweep of data objects
nothing names (:mod:`.rados_sweep`), each one at a time across every gateway of the pool under
a RADOS lock (:mod:`.rados_lock`).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import rados

from . import rados_data, rados_sweep, sse
from .checksums import Digests, requested_algorithms
from .config import ConfigWatcher
from .core import MAX_OBJECT_SIZE, Gateway, Stored, WorkerRole
from .errors import S3Error
from .index import Op, OpResult, Record
from .lifecycle import lifecycle_loop
from .rados_buckets import PING_INTERVAL, RadosBucketStore
from .rados_data import INLINE_LIMIT, ChunkWriter
from .rados_index import BucketGone, dkey
from .rados_lock import RadosLock
from .rados_sweep import sweep_loop
from .shared import next_seq, set_seq_slot

log = logging.getLogger("strata.s3.rados")
DEFAULT_SHARDS = 8
SWEEP_INTERVAL = 6 * 3600

def not_implemented(what: str) -> S3Error:
    return S3Error("NotImplemented", f"{what} is not implemented yet for buckets stored in RADOS "
                   "(a Ceph pool's S3 store); use a bucket on a local pool for it")


def connect(store: dict):
    """(cluster, ioctx) of the store config's pool."""
    conf = {"objecter_tick_interval": str(PING_INTERVAL)}   # pings the bucket watches
    if store.get("keyring"):
        conf["keyring"] = store["keyring"]
    cluster = rados.Rados(conffile=store["ceph_conf"], name=f"client.{store.get('client') or 'admin'}", conf=conf)
    cluster.connect(timeout=30)
    return cluster, cluster.open_ioctx(store["pool"])


class RadosGateway(Gateway):
    """The request handlers' gateway, with buckets in a RADOS pool."""

    kind = "rados"
    no_tier = ("Buckets stored in RADOS (a Ceph pool's S3 store) have no capacity tier, so a lifecycle "
               "Transition has nowhere to move their versions; use a bucket on a local pool for transitions")

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
        self.lifecycle_lock = RadosLock(self.ioctx, "strata.lifecycle")   # one pass at a time, all gateways
        self.sweep_lock = RadosLock(self.ioctx, "strata.sweep")           # one sweep at a time, all gateways
        self.io = ThreadPoolExecutor(max_workers=16, thread_name_prefix="s3-rados")

    async def start(self) -> None:
        """Run lifecycle passes every ``lifecycle_interval`` seconds and sweeps every
        ``sweep_interval`` seconds (worker 0; 0: never)."""
        if self.role is not None and self.role.slot != 0:
            return
        loop = asyncio.get_running_loop()
        interval = float(self.config.get("lifecycle_interval", 3600))
        if interval > 0:
            self.background.append(loop.create_task(lifecycle_loop(self, interval)))
        every = float(self.config.get("sweep_interval", SWEEP_INTERVAL))
        if every > 0:
            self.background.append(loop.create_task(sweep_loop(self, every, self._grace(None))))

    def _grace(self, grace: float | None) -> float:
        return float(grace if grace is not None else self.config.get("sweep_grace", rados_sweep.GRACE))

    async def sweep(self, grace: float | None = None) -> dict:
        """Remove data objects no entry names, and what deleted buckets left, older than
        ``grace`` seconds (``sweep_grace``, an hour, if None): :mod:`.rados_sweep`."""
        return await rados_sweep.sweep_now(self, self._grace(grace))

    async def stop(self) -> None:
        for task in self.background:
            task.cancel()
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
        try:
            result = await self.run(bucket.index.apply, op, bytes(data) if data is not None else None)
        except BucketGone:   # deleted on some gateway after this request found it
            if op.record is not None and "r" in op.record.loc and "mpu" not in op.record.loc:
                await self.run(self._remove, [op.record.loc])
            raise S3Error("NoSuchBucket", BucketName=bucket.name, resource=f"/{bucket.name}") from None
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
            except rados.Error as exc:  # left to the sweep (rados_sweep): logged
                log.warning("data objects %s left: %s", loc, exc)

    async def store_body(self, bucket, body, headers: dict[str, str], dest_dir: str | None = None,
                         force_file: bool = False, cipher=None, defer: bool = False) -> Stored:
        """Receive a body: inline (kept for the index op) when small and ``defer``, else into
        data objects written before the index names them; with a ``cipher`` the bytes are
        stored encrypted (:mod:`.sse`)."""
        size = body.size
        if size is not None and size > MAX_OBJECT_SIZE:
            raise S3Error("EntityTooLarge")
        bucket.check_quota(size or 0, add_objects=0)
        digests = Digests(requested_algorithms(headers), payload_sha256=bool(body.payload_hash))
        if defer and size is not None and size < INLINE_LIMIT and not force_file:
            data = await body.read_all(INLINE_LIMIT)
            digests.update(data)
            checks = digests.verify(headers, body.trailers, body.payload_hash)
            return Stored({"i": 1}, digests.size, digests.md5.hexdigest(), checks, True,
                          cipher.seal_all(data) if cipher else data)
        writer = ChunkWriter(self.ioctx, bucket.index.bid)
        try:
            await self._pump(body.stream(), writer, digests, cipher)
            checks = digests.verify(headers, body.trailers, body.payload_hash)
            loc = await self.run(writer.finish)
        except BaseException:
            await self.run(writer.abort)
            raise
        return Stored(loc, digests.size, digests.md5.hexdigest(), checks, True)

    async def _pump(self, chunks, writer: ChunkWriter, digests: Digests, cipher=None) -> None:
        """Hash (and seal) and write blocks on the I/O pool, one job in flight while the next
        arrive."""
        loop = asyncio.get_running_loop()

        def job(blocks, last=False):
            for block in blocks:
                digests.update(block)
            if cipher is not None:
                blocks = [c for block in blocks for c in cipher.update(block)] + (cipher.final() if last else [])
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
            await loop.run_in_executor(self.io, job, blocks, True)
        finally:
            if pending is not None:
                await asyncio.wait([pending])

    async def copy_data(self, bucket, src: Record, start: int = 0, end: int | None = None,
                        dest_dir: str | None = None, force_file: bool = False, cipher=None, src_key=None,
                        algorithms: set[str] = frozenset()) -> Stored:
        """Store a copy of bytes [start, end) of ``src`` in new data objects, encrypted with
        ``cipher`` if given; ``src_key``: the source's SSE-C key."""
        end = src.size if end is None else end
        bucket.check_quota(end - start, add_objects=0)
        digests = Digests(algorithms)
        writer = ChunkWriter(self.ioctx, bucket.index.bid)
        try:
            await self._pump(self.read(src, start, end, src_key), writer, digests, cipher)
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
        FileNotFoundError here, before any header is sent); an encrypted version's packages
        are opened with its data key (SSE-C: the customer's ``ckey``)."""
        end = rec.size if end is None else end
        if end <= start:
            return b""
        dek = sse.data_key(self.keyring, rec.meta["sse"], ckey) if "sse" in rec.meta else None
        if "i" in rec.loc:
            data = await self.run(self._inline, rec)
            if dek is None:
                return data[start:end]
            return b"".join(sse.read_stream(rec, start, end, dek, lambda n, off: data[off:off + n],
                                            f"the inline bytes of {rec.key}"))
        if dek is None:
            blocks = rados_data.read_blocks(self.ioctx, rados_data.ranges(rec.loc, start, end))
        else:
            blocks = sse.read_stream(rec, start, end, dek, lambda n, off: b"".join(rados_data.read_blocks(
                self.ioctx, rados_data.ranges(rec.loc, off, off + n))), f"the data objects of {rec.key}")
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

    def abort_stale_uploads(self, bucket, prefix: str, older_than: float) -> int:
        from . import rados_multipart   # the request layer's module (loaded by then)
        return rados_multipart.abort_stale(self, bucket, prefix, older_than)

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
