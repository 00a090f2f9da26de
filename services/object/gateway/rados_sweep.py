"""The sweep of a RADOS pool's S3 objects that nothing names: data objects of bodies whose
index op never came (a gateway killed between writing a large body's data objects and its
index op, a removal after an overwrite that failed) and every object of a bucket no longer in
the registry (a DeleteBucket that died half way, a multipart upload created while its bucket
was deleted).

A data object ``<bucket-id>.d.<write>.<n>`` is kept while a version's record (``v/`` in the
index shards) or a part of a multipart upload (open, completing or completed) names it, and
while any unnamed piece of the same write changed less than ``grace`` seconds ago (a PUT
still streaming, or between its data and its index op). The pool is listed before the index
is read, so a body committed during the sweep is either named by then or too young. One
sweep at a time across every gateway of the pool (a RADOS lock, :mod:`.rados_lock`); run from
the admin interface (``POST /_strata/admin/gc?min_age=SECONDS``) and every ``sweep_interval``
seconds by worker 0 of each gateway (about one per interval between them).
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import time

import rados

from .rados_buckets import REGISTRY, upload_oid, uploads_oid
from .rados_data import omap_vals

log = logging.getLogger("strata.s3.rados")
GRACE = 3600.0
OURS = re.compile(r"^(b\.[0-9a-f]{16})\.(?:d\.([0-9a-f]{32})\.\d+$)?")


def _named(io, bucket_id: str, shards: int) -> set[str]:
    """Every data object a version or an upload's part of the bucket names."""
    names: set[str] = set()
    for n in range(shards):
        for raw in omap_vals(io, f"{bucket_id}.index.{n}", prefix="v/").values():
            names.update(p[0] for p in json.loads(raw)["loc"].get("r", []))
    for k in omap_vals(io, uploads_oid(bucket_id)):
        upload_id = k.rpartition("\x01")[2] if k.startswith("o/") else k[2:]
        for raw in omap_vals(io, upload_oid(bucket_id, upload_id), prefix="part/").values():
            names.update(p[0] for p in json.loads(raw)["loc"].get("r", []))
    return names


def _mtime(io, name: str) -> float | None:
    try:
        return time.mktime(io.stat(name)[1])
    except rados.ObjectNotFound:
        return None


def sweep(io, grace: float = GRACE) -> dict:
    """Remove what nothing names and is older than ``grace`` seconds (blocking; hold the lock)."""
    started = time.time()
    writes: dict[tuple[str, str], list[str]] = {}   # (bucket id, write) -> its data objects
    others: dict[str, list[str]] = {}               # bucket id -> its other objects
    for obj in io.list_objects():
        m = OURS.match(obj.key)
        if m is None:
            continue
        if m.group(2):
            writes.setdefault((m.group(1), m.group(2)), []).append(obj.key)
        else:
            others.setdefault(m.group(1), []).append(obj.key)
    live = {e["id"]: e["shards"] for e in (json.loads(v) for v in omap_vals(io, REGISTRY).values())}
    named = {bid: _named(io, bid, shards) for bid, shards in live.items()
             if any(b == bid for b, _ in writes)}
    stats = {"data_objects_removed": 0, "bytes_freed": 0, "objects_of_deleted_buckets_removed": 0,
             "young_kept": 0}
    doomed: list[str] = []
    for (bid, _write), names in writes.items():
        unnamed = [n for n in names if n not in named.get(bid, ())]
        if not unnamed:
            continue
        times = [_mtime(io, n) for n in unnamed]
        if any(t is not None and started - t < grace for t in times):
            stats["young_kept"] += len(unnamed)
            continue
        doomed += unnamed
    for bid, names in others.items():
        if bid in live:
            continue
        if any(t is not None and started - t < grace for t in (_mtime(io, n) for n in names)):
            stats["young_kept"] += len(names)
            continue
        for name in names:
            _remove(io, name, stats, "objects_of_deleted_buckets_removed")
    for name in doomed:
        _remove(io, name, stats, "data_objects_removed")
    if stats["data_objects_removed"] or stats["objects_of_deleted_buckets_removed"]:
        log.info("sweep: %s", stats)
    return stats


def _remove(io, name: str, stats: dict, counter: str) -> None:
    try:
        size = io.stat(name)[0]
        io.remove_object(name)
    except rados.ObjectNotFound:
        return
    stats[counter] += 1
    stats["bytes_freed"] += size


async def sweep_now(gw, grace: float = GRACE) -> dict:
    """One sweep under the pool's sweep lock (waits while another gateway sweeps)."""
    async with gw.sweep_lock.hold():
        stats = await gw.run(sweep, gw.ioctx, grace)
        await gw.run(gw.sweep_lock.record_pass)
    return stats


async def sweep_loop(gw, interval: float, grace: float) -> None:
    """A sweep every ``interval`` seconds, skipped when any gateway swept less than half of
    one ago (as lifecycle passes are)."""
    while True:
        await asyncio.sleep(interval)
        try:
            if time.time() - await gw.run(gw.sweep_lock.last_pass) >= interval / 2:
                await sweep_now(gw, grace)
        except Exception:  # noqa: BLE001 - tried again next interval; the log says why
            log.exception("sweep failed")
