"""The DCP readers of a leased Strata checkpoint version (no Django; imports torch and
boto3): `StrataStorageReader` from its directory, `StrataS3StorageReader` from its S3 prefix
by ranged GETs in parallel."""
from __future__ import annotations

import concurrent.futures
import io

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.planner import LoadItemType
from torch.futures import Future

from services.checkpoints.dcp.s3_filesystem import MiB, S3FileSystem, S3Version, require_s3
from services.checkpoints.sdkerrors import StrataError
from services.checkpoints.sources import parse_prefix


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


class StrataS3StorageReader(S3Version, _LeasedReader, FileSystemReader):
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
            s3 = require_s3(client, self.version)
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
