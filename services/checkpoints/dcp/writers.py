"""The DCP writers of a Strata checkpoint version (no Django; imports torch and boto3):
`StrataStorageWriter` into its directory, `StrataS3StorageWriter` under its S3 prefix. Both
commit in `finish()` on the coordinator, after `.metadata` is written."""
from __future__ import annotations

import hashlib
import os
import pickle

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from services.checkpoints.dcp.s3_filesystem import MiB, S3FileSystem, S3Version, require_s3
from services.checkpoints.sources import parse_prefix

METADATA = ".metadata"


class _Extent:
    """What a rank's WriteResult carries to the coordinator: the DCP storage info, plus the
    size and sha256 of the whole object it lies in (for the manifest)."""

    def __init__(self, info: _StorageInfo, object_size: int, sha256: str | None):
        self.info, self.object_size, self.sha256 = info, object_size, sha256


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


class StrataS3StorageWriter(S3Version, FileSystemWriter):
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
        s3 = require_s3(client, self.version)
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
