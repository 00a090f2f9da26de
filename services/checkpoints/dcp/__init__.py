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

Modules: `s3_filesystem` (S3 underneath DCP: the client, the streamed
multipart upload, `S3FileSystem`), `writers`, `readers`; this one picks a writer or reader
for a version.

Everything here works with `dcp.save`, `dcp.async_save` (the writers are
`BlockingAsyncStager`s like `FileSystemWriter`) and `dcp.load`.
"""
from __future__ import annotations

from typing import Any

from services.checkpoints.dcp.readers import StrataS3StorageReader, StrataStorageReader
from services.checkpoints.dcp.writers import StrataS3StorageWriter, StrataStorageWriter

__all__ = ["StrataS3StorageReader", "StrataS3StorageWriter", "StrataStorageReader",
           "StrataStorageWriter", "storage_reader", "storage_writer"]


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
