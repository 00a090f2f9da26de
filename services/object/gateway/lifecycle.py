"""Bucket lifecycle: Put/Get/DeleteBucketLifecycleConfiguration and the expiration pass.

Supported rule actions: ``Expiration`` (Days or Date, and ExpiredObjectDeleteMarker),
``NoncurrentVersionExpiration`` (NoncurrentDays) and ``AbortIncompleteMultipartUpload``
(DaysAfterInitiation), filtered by prefix. ``Transition`` rules are refused with
NotImplemented until the capacity tier exists. The pass runs with segment compaction in the
background and on demand through the admin interface (``POST /_strata/admin/lifecycle``).
A "day" lasts ``lifecycle_day_seconds`` from the config (86400 unless a test shortens it).
Versions a bucket snapshot holds (:mod:`.snapshots`) are left in place and counted as
``held``.
"""
from __future__ import annotations

import calendar
import json
import os
import shutil
import time

from .buckets import Bucket
from .errors import S3Error, child_text, parse_xml

DAY_SECONDS = 86400


def parse_rules(body: bytes) -> list[dict]:
    """Rules from a LifecycleConfiguration document (``MalformedXML`` / ``NotImplemented``)."""
    root = parse_xml(body)
    if root.tag != "LifecycleConfiguration":
        raise S3Error("MalformedXML")
    rules = []
    for node in root.findall("Rule"):
        status = child_text(node, "Status")
        if status not in ("Enabled", "Disabled"):
            raise S3Error("MalformedXML", "Rule Status must be Enabled or Disabled")
        if node.find("Transition") is not None or node.find("NoncurrentVersionTransition") is not None:
            raise S3Error("NotImplemented", "Lifecycle transitions are not implemented yet")
        flt = node.find("Filter")
        prefix = child_text(node, "Prefix")
        if flt is not None:
            and_node = flt.find("And")
            prefix = child_text(and_node if and_node is not None else flt, "Prefix", "")
        rule = {"id": child_text(node, "ID", ""), "enabled": status == "Enabled", "prefix": prefix or ""}
        exp = node.find("Expiration")
        try:
            if exp is not None:
                if child_text(exp, "Days") is not None:
                    rule["days"] = int(child_text(exp, "Days"))
                if child_text(exp, "Date"):
                    rule["date"] = calendar.timegm(time.strptime(child_text(exp, "Date")[:19], "%Y-%m-%dT%H:%M:%S"))
                if (child_text(exp, "ExpiredObjectDeleteMarker") or "").lower() == "true":
                    rule["expired_marker"] = True
            nve = node.find("NoncurrentVersionExpiration")
            if nve is not None:
                rule["noncurrent_days"] = int(child_text(nve, "NoncurrentDays"))
            abort = node.find("AbortIncompleteMultipartUpload")
            if abort is not None:
                rule["abort_days"] = int(child_text(abort, "DaysAfterInitiation"))
        except (TypeError, ValueError):
            raise S3Error("MalformedXML", "Lifecycle days and dates must be integers / ISO 8601 dates") from None
        if len(rule) == 3:
            raise S3Error("MalformedXML", "A lifecycle rule needs at least one action")
        rules.append(rule)
    if not rules:
        raise S3Error("MalformedXML", "A lifecycle configuration needs at least one Rule")
    return rules


def _expiry_candidates(bucket: Bucket, rule: dict, now: float, day: float) -> tuple[list, list]:
    """(keys whose current version expired, (key, version_id) noncurrent or lone markers to drop)."""
    current, versions = [], []
    by_key: dict[str, list] = {}
    for rec in bucket.index.iter_versions(rule["prefix"]):
        by_key.setdefault(rec.key, []).append(rec)
    for key, recs in by_key.items():
        latest = recs[0]
        if not latest.marker and latest.latest:
            if ("days" in rule and now - latest.mtime >= rule["days"] * day) or ("date" in rule and now >= rule["date"]):
                current.append(key)
        if latest.marker and len(recs) == 1 and rule.get("expired_marker"):
            versions.append((key, latest.version_id))
        if "noncurrent_days" in rule:
            newer_mtime = latest.mtime
            for rec in recs[1:]:
                # a version becomes noncurrent when the next newer one is written
                if now - newer_mtime >= rule["noncurrent_days"] * day:
                    versions.append((key, rec.version_id))
                newer_mtime = rec.mtime
    return current, versions


def _abort_stale_uploads(bucket: Bucket, prefix: str, older_than: float) -> int:
    count = 0
    for upload_id in os.listdir(bucket.uploads_dir):
        path = os.path.join(bucket.uploads_dir, upload_id)
        try:
            with open(os.path.join(path, "upload.json")) as fh:
                info = json.load(fh)
        except (OSError, ValueError):
            continue
        if info["key"].startswith(prefix) and info["initiated"] < older_than:
            shutil.rmtree(path, ignore_errors=True)
            count += 1
    return count


async def apply_lifecycle(gw) -> dict:
    """One expiration pass over every bucket with enabled rules."""
    from .object_ops import delete_version_or_key
    now = time.time()
    day = float(gw.config.get("lifecycle_day_seconds") or DAY_SECONDS)
    stats = {"expired": 0, "versions_removed": 0, "uploads_aborted": 0}
    for bucket in list(gw.buckets.buckets.values()):
        for rule in (bucket.settings.get("lifecycle") or {}).get("rules", []):
            if not rule["enabled"]:
                continue
            current, versions = await gw.run(_expiry_candidates, bucket, rule, now, day)
            for key in current:
                await delete_version_or_key(gw, bucket, key, None)
                stats["expired"] += 1
            for key, vid in versions:
                try:
                    await delete_version_or_key(gw, bucket, key, vid)
                except S3Error as err:
                    if err.code != "AccessDenied":
                        raise
                    stats["held"] = stats.get("held", 0) + 1  # named by a bucket snapshot
                    continue
                stats["versions_removed"] += 1
            if "abort_days" in rule:
                stats["uploads_aborted"] += await gw.run(_abort_stale_uploads, bucket, rule["prefix"],
                                                         now - rule["abort_days"] * day)
    return stats


async def lifecycle_loop(gw, interval: float) -> None:
    """Run :func:`apply_lifecycle` every ``interval`` seconds."""
    import asyncio
    import logging
    log = logging.getLogger("strata.s3.lifecycle")
    while True:
        await asyncio.sleep(interval)
        try:
            stats = await apply_lifecycle(gw)
            if any(stats.values()):
                log.info("lifecycle: %s", stats)
        except Exception:  # noqa: BLE001 - try again next interval; the log says why
            log.exception("lifecycle pass failed")
