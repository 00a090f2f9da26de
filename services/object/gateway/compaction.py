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
import logging

from .index import Op

log = logging.getLogger("strata.s3.compaction")
LIVE_RATIO = 0.5
INTERVAL_SECONDS = 60.0


async def compact_once(gw, live_ratio: float = LIVE_RATIO) -> dict:
    """One pass over closed segments; returns counts for the admin interface and logs."""
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
            data = await gw.run(gw.segments.read, rec.loc, rec.size)
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
