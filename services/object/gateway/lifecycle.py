"""Bucket lifecycle: Put/Get/DeleteBucketLifecycleConfiguration and the lifecycle pass.

Supported rule actions, filtered by prefix: ``Expiration`` (Days or Date, and
ExpiredObjectDeleteMarker), ``NoncurrentVersionExpiration`` (NoncurrentDays),
``AbortIncompleteMultipartUpload`` (DaysAfterInitiation), ``Transition`` (Days or Date, and a
StorageClass) and ``NoncurrentVersionTransition`` (NoncurrentDays, StorageClass), filtered by
prefix, tags (``Tag``, or several in ``And``: a version must carry every one) and object size
(``ObjectSizeGreaterThan`` / ``ObjectSizeLessThan``). Transitions
move versions to the capacity tier; the storage classes, what GET does with each and how a
move stays crash-safe are in :mod:`.tiers`. Without a ``cold_root`` in the config, a rule
with a transition is refused with ``InvalidStorageClass`` saying why. Not implemented:
``NewerNoncurrentVersions``.

One pass at a time, across every worker process (``Gateway.lifecycle_lock``, an ``flock``): remove cold copies a crash left unreferenced,
then per bucket and enabled rule expire, abort stale uploads and transition (to the coldest
class whose time has come; a version never moves back to a warmer class), then drop expired
restored copies. It runs every ``lifecycle_interval`` seconds in the background (0: never;
the appliance's plane runs it instead, as a Job) and on demand through the admin interface
(``POST /_strata/admin/lifecycle``). A "day" lasts
``lifecycle_day_seconds`` from the config (86400 unless a test shortens it).

The same pass runs over buckets stored in RADOS (:mod:`.rados_store`): the rules are a bucket
setting every gateway of the pool shares, the lock is a RADOS lock with a lease
(:mod:`.rados_lock`), so one pass at a time across every gateway on every node, and timed
passes skip while another gateway ended one less than half an interval ago. That store has
no capacity tier: a rule with a transition is refused (``InvalidStorageClass``, saying so).
"""
from __future__ import annotations

import asyncio
import calendar
import json
import logging
import math
import os
import re
import secrets
import shutil
import time

from email.utils import formatdate

from .buckets import Bucket
from .errors import S3Error, child_text, parse_xml
from .tiers import RANK, check_transition_class, storage_class

DAY_SECONDS = 86400
log = logging.getLogger("strata.s3.lifecycle")


def parse_rules(body: bytes, cold_root: str | None = None, no_tier: str | None = None) -> list[dict]:
    """Rules from a LifecycleConfiguration document (``MalformedXML`` / ``InvalidStorageClass``;
    ``no_tier``: why the store has no capacity tier, the refusal of any transition)."""
    root = parse_xml(body)
    if root.tag != "LifecycleConfiguration":
        raise S3Error("MalformedXML")
    rules = []
    for node in root.findall("Rule"):
        status = child_text(node, "Status")
        if status not in ("Enabled", "Disabled"):
            raise S3Error("MalformedXML", "Rule Status must be Enabled or Disabled")
        flt = node.find("Filter")
        prefix = child_text(node, "Prefix")
        selector: dict = {}
        if flt is not None:
            and_node = flt.find("And")
            scope = and_node if and_node is not None else flt
            prefix = child_text(scope, "Prefix", "")
            selector = _filter_selector(scope)
        rule = {"id": child_text(node, "ID", ""), "enabled": status == "Enabled", "prefix": prefix or ""}
        if len(rule["id"]) > 255:
            raise S3Error("InvalidArgument", "ID length should not exceed allowed limit of 255")
        if rule["id"] and any(r["id"] == rule["id"] for r in rules):
            raise S3Error("InvalidArgument", "Rule ID must be unique. Found same ID for more than one rule")
        exp = node.find("Expiration")
        try:
            if exp is not None:
                if child_text(exp, "Days") is not None:
                    rule["days"] = int(child_text(exp, "Days"))
                if child_text(exp, "Date"):
                    rule["date"] = _midnight(child_text(exp, "Date"))
                if (child_text(exp, "ExpiredObjectDeleteMarker") or "").lower() == "true":
                    rule["expired_marker"] = True
            nve = node.find("NoncurrentVersionExpiration")
            if nve is not None:
                rule["noncurrent_days"] = int(child_text(nve, "NoncurrentDays"))
            abort = node.find("AbortIncompleteMultipartUpload")
            if abort is not None:
                rule["abort_days"] = int(child_text(abort, "DaysAfterInitiation"))
            for tr in node.findall("Transition"):
                step = {"class": check_transition_class(child_text(tr, "StorageClass"), cold_root, no_tier)}
                if child_text(tr, "Days") is not None:
                    step["days"] = int(child_text(tr, "Days"))
                elif child_text(tr, "Date"):
                    step["date"] = _midnight(child_text(tr, "Date"))
                else:
                    raise S3Error("MalformedXML", "A Transition needs Days or Date")
                rule.setdefault("transitions", []).append(step)
            for tr in node.findall("NoncurrentVersionTransition"):
                step = {"class": check_transition_class(child_text(tr, "StorageClass"), cold_root, no_tier),
                        "days": int(child_text(tr, "NoncurrentDays"))}
                rule.setdefault("noncurrent_transitions", []).append(step)
        except (TypeError, ValueError):
            raise S3Error("MalformedXML", "Lifecycle days and dates must be integers / ISO 8601 dates") from None
        if len(rule) == 3:
            raise S3Error("MalformedXML", "A lifecycle rule needs at least one action")
        _check_days(rule)
        if selector.get("tags") and ("abort_days" in rule or rule.get("expired_marker")):
            raise S3Error("InvalidRequest", "AbortIncompleteMultipartUpload and ExpiredObjectDeleteMarker cannot "
                          "be used with a tag-based filter")
        rule.update(selector)
        rules.append(rule)
    if not rules:
        raise S3Error("MalformedXML", "A lifecycle configuration needs at least one Rule")
    return rules


def _midnight(text: str) -> int:
    """A rule's Date as epoch seconds: S3 takes only midnight UTC (``InvalidArgument``
    otherwise; a date that does not parse raises ``ValueError``)."""
    when = calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    if when % DAY_SECONDS:
        raise S3Error("InvalidArgument", "'Date' must be at midnight GMT")
    return when


def _filter_selector(scope) -> dict:
    """The tags and size bounds a rule's Filter (or its And) selects by."""
    out: dict = {}
    tags = {}
    for tag in scope.findall("Tag"):
        key = child_text(tag, "Key")
        if not key:
            raise S3Error("MalformedXML", "A lifecycle filter Tag needs a Key")
        if key in tags:
            raise S3Error("InvalidArgument", "Duplicate Tag Keys are not allowed.")
        tags[key] = child_text(tag, "Value", "")
    if tags:
        out["tags"] = tags
    for field, name in (("ObjectSizeGreaterThan", "size_gt"), ("ObjectSizeLessThan", "size_lt")):
        text = child_text(scope, field)
        if text is not None:
            try:
                out[name] = int(text)
            except ValueError:
                raise S3Error("MalformedXML", f"{field} must be an integer") from None
            if out[name] < 0:
                raise S3Error("InvalidArgument", f"'{field}' must be a non-negative integer")
    if "size_gt" in out and "size_lt" in out and out["size_lt"] <= out["size_gt"]:
        raise S3Error("InvalidArgument", "ObjectSizeLessThan must be greater than ObjectSizeGreaterThan")
    return out


def _check_days(rule: dict) -> None:
    """S3's bounds: expiration and abort days are positive, transition days non-negative."""
    positive = (("days", "'Days' for Expiration action"),
                ("noncurrent_days", "'NoncurrentDays' for NoncurrentVersionExpiration action"),
                ("abort_days", "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action"))
    for field, what in positive:
        if field in rule and rule[field] <= 0:
            raise S3Error("InvalidArgument", f"{what} must be a positive integer")
    for step in rule.get("transitions", []) + rule.get("noncurrent_transitions", []):
        if step.get("days", 0) < 0:
            raise S3Error("InvalidArgument", "'Days' in Transition action must be nonnegative")


def selects(rule: dict, rec) -> bool:
    """Whether ``rule``'s tag and size filters take version ``rec`` (its prefix already did)."""
    tags = rule.get("tags")
    if tags:
        have = rec.meta.get("tags") or {}
        if any(have.get(k) != v for k, v in tags.items()):
            return False
    if "size_gt" in rule and not rec.size > rule["size_gt"]:
        return False
    return not ("size_lt" in rule and not rec.size < rule["size_lt"])


def expires_at(mtime: float, days: int, day: float) -> float:
    """When a version written at ``mtime`` expires under ``Days``: S3 adds the days and rounds up
    to the next midnight UTC (with a shortened test day, no rounding)."""
    at = mtime + days * day
    return math.ceil(at / DAY_SECONDS) * DAY_SECONDS if day == DAY_SECONDS else at


def expiration_header(bucket: Bucket, rec, day: float) -> str | None:
    """``x-amz-expiration`` for the current version ``rec`` (``expiry-date="...", rule-id="..."``,
    the earliest of the enabled Expiration rules that select it), None when none does."""
    best = None
    for rule in (bucket.settings.get("lifecycle") or {}).get("rules", ()):
        if not rule["enabled"] or not rec.key.startswith(rule["prefix"]) or not selects(rule, rec):
            continue
        if "days" in rule:
            at = expires_at(rec.mtime, rule["days"], day)
        elif "date" in rule:
            at = rule["date"]
        else:
            continue
        if best is None or at < best[0]:
            best = (at, rule["id"])
    if best is None:
        return None
    return f'expiry-date="{formatdate(best[0], usegmt=True)}", rule-id="{best[1]}"'


def add_expiration(gw, bucket: Bucket, rec, headers: dict) -> None:
    """Set ``x-amz-expiration`` in ``headers`` when an Expiration rule selects ``rec`` (buckets
    without rules pay one dict lookup)."""
    if not bucket.settings.get("lifecycle"):
        return
    value = expiration_header(bucket, rec, float(gw.config.get("lifecycle_day_seconds") or DAY_SECONDS))
    if value:
        headers["x-amz-expiration"] = value


def name_rules(xml: str, rules: list[dict]) -> str:
    """Give each rule put without an ``ID`` one, as S3 does (a random 48-character name),
    in ``rules`` and in the stored document ``xml`` that GetBucketLifecycleConfiguration returns."""
    order = iter(rules)

    def named(match: re.Match) -> str:
        rule = next(order, None)
        if rule is None or rule["id"] or re.search(r"<ID\b", match.group(2)):
            return match.group(0)
        rule["id"] = secrets.token_hex(24)
        return f"{match.group(1)}<ID>{rule['id']}</ID>{match.group(2)}</Rule>"

    return re.sub(r"(<Rule>)(.*?)</Rule>", named, xml, flags=re.S)


def _expiry_candidates(bucket: Bucket, rule: dict, now: float, day: float) -> tuple[list, list]:
    """(keys whose current version expired, (key, version_id) noncurrent or lone markers to drop)."""
    current, versions = [], []
    by_key: dict[str, list] = {}
    for rec in bucket.index.iter_versions(rule["prefix"]):
        by_key.setdefault(rec.key, []).append(rec)
    for key, recs in by_key.items():
        latest = recs[0]
        if not latest.marker and latest.latest and selects(rule, latest):
            if ("days" in rule and now >= expires_at(latest.mtime, rule["days"], day)) \
                    or ("date" in rule and now >= rule["date"]):
                current.append(key)
        if latest.marker and len(recs) == 1 and rule.get("expired_marker"):
            versions.append((key, latest.version_id))
        if "noncurrent_days" in rule:
            newer_mtime = latest.mtime
            for rec in recs[1:]:
                # a version becomes noncurrent when the next newer one is written
                if now - newer_mtime >= rule["noncurrent_days"] * day and selects(rule, rec):
                    versions.append((key, rec.version_id))
                newer_mtime = rec.mtime
    return current, versions


def _due(steps: list[dict], age: float, now: float, day: float) -> str | None:
    """The coldest class among ``steps`` whose time has come for something ``age`` seconds old."""
    due = [st["class"] for st in steps
           if ("days" in st and age >= st["days"] * day) or ("date" in st and now >= st["date"])]
    return max(due, key=RANK.__getitem__) if due else None


def _transition_candidates(bucket: Bucket, rule: dict, now: float, day: float) -> list[tuple]:
    """(version, target class) for every version a transition of ``rule`` applies to now."""
    out = []
    by_key: dict[str, list] = {}
    for rec in bucket.index.iter_versions(rule["prefix"]):
        by_key.setdefault(rec.key, []).append(rec)
    for recs in by_key.values():
        latest = recs[0]
        if rule.get("transitions") and not latest.marker and selects(rule, latest):
            cls = _due(rule["transitions"], now - latest.mtime, now, day)
            if cls and RANK[cls] > RANK[storage_class(latest)]:
                out.append((latest, cls))
        if rule.get("noncurrent_transitions"):
            newer_mtime = latest.mtime
            for rec in recs[1:]:
                cls = _due(rule["noncurrent_transitions"], now - newer_mtime, now, day)
                if not rec.marker and cls and RANK[cls] > RANK[storage_class(rec)] and selects(rule, rec):
                    out.append((rec, cls))
                newer_mtime = rec.mtime
    return out


def abort_stale_uploads(bucket: Bucket, prefix: str, older_than: float) -> int:
    """The local store's :meth:`.core.Gateway.abort_stale_uploads` (upload directories)."""
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


async def apply_lifecycle(gw, every: float = 0.0) -> dict | None:
    """One lifecycle pass over every bucket (see the module doc); returns counts. With
    ``every``, on a lock shared by several gateways (the RADOS store's, which records when a
    pass ended): None, no pass, when any of them ended one less than ``every`` / 2 ago."""
    async with gw.lifecycle_lock.hold():
        ended = getattr(gw.lifecycle_lock, "last_pass", None)
        if every and ended is not None and time.time() - await gw.run(ended) < every / 2:
            return None
        stats = await _apply(gw)
        if ended is not None:
            await gw.run(gw.lifecycle_lock.record_pass)
        return stats


async def _apply(gw) -> dict:
    now = time.time()
    day = float(gw.config.get("lifecycle_day_seconds") or DAY_SECONDS)
    stats = {"expired": 0, "versions_removed": 0, "uploads_aborted": 0, "transitioned": 0,
             "transitioned_bytes": 0, "transition_failed": 0, "restores_expired": 0,
             "cold_orphans_removed": 0}
    buckets = list(await gw.run(lambda: gw.buckets.buckets.values()))
    if gw.cold is not None:   # (the RADOS store has no capacity tier)
        stats.update(await gw.run(gw.cold.collect_cold_orphans, buckets))
    for bucket in buckets:
        for rule in (bucket.settings.get("lifecycle") or {}).get("rules", []):
            if not rule["enabled"]:
                continue
            current, versions = await gw.run(_expiry_candidates, bucket, rule, now, day)
            for key in current:
                await gw.delete_version_or_key(bucket, key, None)
                stats["expired"] += 1
            for key, vid in versions:
                try:
                    await gw.delete_version_or_key(bucket, key, vid)
                except S3Error as err:
                    if err.code != "AccessDenied":
                        raise
                    stats["held"] = stats.get("held", 0) + 1  # named by a bucket snapshot
                    continue
                stats["versions_removed"] += 1
            if "abort_days" in rule:
                stats["uploads_aborted"] += await gw.run(gw.abort_stale_uploads, bucket, rule["prefix"],
                                                         now - rule["abort_days"] * day)
            if "transitions" in rule or "noncurrent_transitions" in rule:
                await _transition(gw, bucket, rule, now, day, stats)
        if gw.cold is not None:
            stats["restores_expired"] += await gw.cold.expire_restores(bucket, time.time())
    return stats


async def _transition(gw, bucket: Bucket, rule: dict, now: float, day: float, stats: dict) -> None:
    if gw.cold is None or not gw.cold.root or not os.path.isdir(gw.cold.root):
        log.warning("lifecycle rule %r of bucket %s has transitions but the capacity tier (%s) is not "
                    "available; skipped", rule["id"], bucket.name, gw.cold.root)
        return
    for rec, cls in await gw.run(_transition_candidates, bucket, rule, now, day):
        try:
            outcome = await gw.cold.transition(bucket, rec, cls)
        except Exception:  # noqa: BLE001 - the version stays where it was; retried next pass
            log.exception("transition of %s/%s to %s failed", bucket.name, rec.key, cls)
            stats["transition_failed"] += 1
            continue
        if outcome != "raced":
            stats["transitioned"] += 1
            stats["transitioned_bytes"] += rec.size if outcome == "moved" else 0


async def lifecycle_loop(gw, interval: float) -> None:
    """Run :func:`apply_lifecycle` every ``interval`` seconds."""
    while True:
        await asyncio.sleep(interval)
        try:
            stats = await apply_lifecycle(gw, every=interval)
            if stats and any(stats.values()):
                log.info("lifecycle: %s", stats)
        except Exception:  # noqa: BLE001 - try again next interval; the log says why
            log.exception("lifecycle pass failed")
