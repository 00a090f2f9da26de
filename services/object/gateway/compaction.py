"""Background compaction of small-object segments.

A segment stops growing when it reaches ``segment_bytes``; from then on overwrites and
deletes only make its bytes dead. The compactor finds closed segments whose live bytes (the
versions the index still points at) are below ``LIVE_RATIO`` of the file, copies those
versions into the active segment, repoints each index entry with a compare-and-set through
the group committer (after the segment fsync, so a crash leaves either location valid), and
deletes the old file once nothing refers to it.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time

from .index import Op
from .sse import physical_size

log = logging.getLogger("strata.s3.compaction")
LIVE_RATIO = 0.5
INTERVAL_SECONDS = 60.0


async def compact_once(gw, live_ratio: float = LIVE_RATIO) -> dict:
    """One pass over closed segments; returns counts for the admin interface and logs (one
    pass at a time across every worker process: ``Gateway.compaction_lock``)."""
    async with gw.compaction_lock.hold():
        return await _compact(gw, live_ratio)


async def _compact(gw, live_ratio: float) -> dict:
    stats = {"segments_checked": 0, "segments_removed": 0, "objects_moved": 0, "bytes_moved": 0,
             "bytes_reclaimed": 0}
    for seg_id, size in await gw.run(gw.segments.closed_segments):
        stats["segments_checked"] += 1
        owners = []
        for bucket in list(gw.buckets.buckets.values()):
            recs = await gw.run(bucket.index.in_segment, seg_id)
            owners.extend((bucket, r) for r in recs)
        live = sum(r.size for _, r in owners)
        if size and live / size >= live_ratio:
            continue
        for bucket, rec in owners:
            data = await gw.run(gw.segments.read, rec.loc, physical_size(rec))
            new_loc = gw.segments.append(data)
            await gw.commit(bucket, Op("relocate", key=rec.key, seq=rec.seq, old_loc=rec.loc, new_loc=new_loc),
                            in_segment=True)
            stats["objects_moved"] += 1
            stats["bytes_moved"] += rec.size
        still = 0
        for bucket in list(gw.buckets.buckets.values()):
            still += len(await gw.run(bucket.index.in_segment, seg_id))
        if still:
            log.warning("segment %d still has %d references after compaction; keeping it", seg_id, still)
            continue
        await gw.run(gw.segments.remove, seg_id)
        stats["segments_removed"] += 1
        stats["bytes_reclaimed"] += size - live
    return stats


async def compaction_loop(gw, interval: float = INTERVAL_SECONDS) -> None:
    """Run :func:`compact_once` forever, every ``interval`` seconds."""
    while True:
        await asyncio.sleep(interval)
        try:
            stats = await compact_once(gw)
            if stats["segments_removed"]:
                log.info("compaction: %s", stats)
        except Exception:  # noqa: BLE001 - keep compacting later; the log says why
            log.exception("segment compaction failed")


ORPHAN_MIN_AGE = 600.0


def collect_orphans(bucket, min_age: float = ORPHAN_MIN_AGE, started: float | None = None) -> dict:
    """Delete large-object files and completed-upload directories under ``data/`` that no
    index entry refers to (left by a crash while they were written, or between their fsync
    and their index commit). Files younger than ``min_age`` seconds are left alone: their PUT
    may still be committing; but a file (not an upload directory) older than ``started`` (this
    gateway's start) cannot belong to a PUT in flight, whatever its age."""
    referenced, dirs = set(), set()
    for shard in bucket.index.shards:
        for (loc,) in shard.query("SELECT loc FROM versions WHERE json_extract(loc, '$.seg') IS NULL"):
            loc = json.loads(loc)
            if "file" in loc:
                referenced.add(loc["file"])
            for path, _ in loc.get("parts", []):
                referenced.add(path)
            if "dir" in loc:
                dirs.add(loc["dir"])
    cutoff = time.time() - min_age
    # a large-object file is created by its PUT, so one older than the start is no PUT's now
    # (not so an upload directory: its mtime is that of its last part, before a Complete)
    file_cutoff = cutoff if started is None else max(cutoff, started)
    stats = {"files_removed": 0, "dirs_removed": 0, "bytes_freed": 0}
    if not os.path.isdir(bucket.data_dir):
        return stats
    for entry in os.scandir(bucket.data_dir):
        if entry.name.startswith("mpu-"):
            if entry.path not in dirs and entry.stat().st_mtime < cutoff:
                shutil.rmtree(entry.path, ignore_errors=True)
                stats["dirs_removed"] += 1
            continue
        if not entry.is_dir():
            continue
        for f in os.scandir(entry.path):
            st = f.stat()
            if f.path not in referenced and st.st_mtime < file_cutoff:
                os.unlink(f.path)
                stats["files_removed"] += 1
                stats["bytes_freed"] += st.st_size
    return stats


async def collect_all_orphans(gw, min_age: float = ORPHAN_MIN_AGE, delay: float = 0.0,
                              started: float | None = None) -> dict:
    """:func:`collect_orphans` over every bucket (after ``delay`` seconds)."""
    if delay:
        await asyncio.sleep(delay)
    total = {"files_removed": 0, "dirs_removed": 0, "bytes_freed": 0}
    for bucket in list(gw.buckets.buckets.values()):
        try:
            stats = await gw.run(collect_orphans, bucket, min_age, started)
        except OSError:
            log.exception("orphan collection failed in bucket %s", bucket.name)
            continue
        for k, v in stats.items():
            total[k] += v
    if total["files_removed"] or total["dirs_removed"]:
        log.info("orphans removed: %s", total)
    return total
