"""Object Lock (WORM): retention (GOVERNANCE, COMPLIANCE), legal holds, default retention.

A bucket gets Object Lock at creation (``x-amz-bucket-object-lock-enabled: true``, which
also turns versioning on for good), or later with PutObjectLockConfiguration once its
versioning is Enabled. Its setting ``object_lock`` is ``{"enabled": true, ["rule": {"mode",
"days" | "years"}]}``; the rule's default retention applies to every new version that names
none. A version's own lock lives in its metadata: ``meta["lock"] = {"mode", "until"}`` (epoch
seconds) and ``meta["hold"]`` (legal hold on).

What it refuses (403 ``AccessDenied``, as S3): deleting a version (DeleteObject or
DeleteObjects with a versionId, and lifecycle's noncurrent expiration, which goes through the
same :meth:`.core.Gateway.delete_version_or_key`) that has a legal hold, COMPLIANCE retention
in force, or GOVERNANCE retention in force without ``x-amz-bypass-governance-retention:
true``; shortening or removing COMPLIANCE retention; shortening, removing or changing the
mode of GOVERNANCE retention without the bypass header. A delete without a versionId only adds a
delete marker, and an overwrite adds a version: both are allowed, the locked versions stay.
The bypass header counts only for callers allowed ``s3:BypassGovernanceRetention`` (the
owner and admins unless the bucket policy denies it, others through a policy Allow: see
:func:`.access.may_bypass_governance`); for anyone else it is ignored.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone

from .errors import ERROR_CODES, S3Error, child_text, el, parse_xml, xml_doc

MODES = ("GOVERNANCE", "COMPLIANCE")
DAY = 86400
LOCKED = "Access Denied because object protected by object lock."
BYPASS_HEADER = "x-amz-bypass-governance-retention"

ERROR_CODES.update({
    "ObjectLockConfigurationNotFoundError": (404, "Object Lock configuration does not exist for this bucket"),
    "NoSuchObjectLockConfiguration": (404, "The specified object does not have a ObjectLock configuration"),
    "InvalidRetentionPeriod": (400, "Default retention period must be a positive integer value."),
})


def enabled(bucket) -> bool:
    """Whether the bucket has Object Lock."""
    return bool((bucket.settings.get("object_lock") or {}).get("enabled"))


def _require(bucket) -> None:
    if not enabled(bucket):
        raise S3Error("InvalidRequest", "Bucket is missing Object Lock Configuration")


def bypass(headers: dict[str, str]) -> bool:
    """Whether a request asks to bypass GOVERNANCE retention."""
    return (headers.get(BYPASS_HEADER) or "").strip().lower() == "true"


def parse_date(value: str, name: str) -> float:
    """Epoch seconds of an ISO 8601 date (``InvalidArgument`` otherwise)."""
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise S3Error("InvalidArgument", f"{name} must be an ISO 8601 date and time", ArgumentName=name,
                      ArgumentValue=value) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def iso(ts: float) -> str:
    """S3's ISO 8601 form of a retain-until date."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


def in_force(meta: dict, now: float | None = None) -> dict | None:
    """The version's retention, if it has not expired."""
    lock = meta.get("lock")
    if lock and lock["until"] > (time.time() if now is None else now):
        return lock
    return None


# -- bucket configuration ---------------------------------------------------------------------


def enable_at_creation(headers: dict[str, str]) -> bool:
    """Whether CreateBucket asks for Object Lock (``InvalidArgument`` for a bad value)."""
    value = headers.get("x-amz-bucket-object-lock-enabled")
    if value is None:
        return False
    if value.strip().lower() not in ("true", "false"):
        raise S3Error("InvalidArgument", "x-amz-bucket-object-lock-enabled must be true or false",
                      ArgumentName="x-amz-bucket-object-lock-enabled", ArgumentValue=value)
    return value.strip().lower() == "true"


def parse_configuration(body: bytes, bucket) -> dict:
    """PutObjectLockConfiguration's document -> the bucket setting."""
    root = parse_xml(body)
    if root.tag != "ObjectLockConfiguration":
        raise S3Error("MalformedXML")
    if child_text(root, "ObjectLockEnabled") != "Enabled":
        raise S3Error("MalformedXML", "ObjectLockEnabled must be Enabled")
    if not enabled(bucket) and bucket.versioning != "Enabled":
        raise S3Error("InvalidBucketState", "Versioning must be 'Enabled' on the bucket to apply a Object Lock "
                      "configuration")
    setting: dict = {"enabled": True}
    rule = root.find("Rule")
    if rule is not None:
        retention = rule.find("DefaultRetention")
        if retention is None:
            raise S3Error("MalformedXML", "A Rule needs a DefaultRetention")
        mode = child_text(retention, "Mode")
        days, years = child_text(retention, "Days"), child_text(retention, "Years")
        if mode not in MODES or (days is None) == (years is None):
            raise S3Error("MalformedXML", "DefaultRetention needs a Mode (GOVERNANCE or COMPLIANCE) and "
                          "either Days or Years")
        try:
            amount = int(days if days is not None else years)
        except ValueError:
            raise S3Error("MalformedXML", "Days and Years must be integers") from None
        if amount <= 0:
            raise S3Error("InvalidRetentionPeriod")
        setting["rule"] = {"mode": mode, ("days" if days is not None else "years"): amount}
    return setting


def configuration_xml(bucket) -> bytes:
    """GetObjectLockConfiguration's document."""
    if not enabled(bucket):
        raise S3Error("ObjectLockConfigurationNotFoundError", BucketName=bucket.name)
    rule = bucket.settings["object_lock"].get("rule")
    body = el("ObjectLockEnabled", "Enabled")
    if rule:
        period = el("Days", rule["days"]) if "days" in rule else el("Years", rule["years"])
        body += f"<Rule><DefaultRetention>{el('Mode', rule['mode'])}{period}</DefaultRetention></Rule>"
    return xml_doc("ObjectLockConfiguration", body)


# -- new versions -----------------------------------------------------------------------------


def for_new_version(bucket, headers: dict[str, str], now: float | None = None) -> dict:
    """The lock metadata a new version gets (``{"lock": ..., "hold": ...}``, maybe empty):
    from the request's x-amz-object-lock-* headers, else the bucket's default retention."""
    now = time.time() if now is None else now
    mode = headers.get("x-amz-object-lock-mode")
    until = headers.get("x-amz-object-lock-retain-until-date")
    hold = headers.get("x-amz-object-lock-legal-hold")
    out: dict = {}
    if mode is not None or until is not None or hold is not None:
        _require(bucket)
    if (mode is None) != (until is None):
        raise S3Error("InvalidArgument", "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both "
                      "be supplied", ArgumentName="x-amz-object-lock-mode")
    if mode is not None:
        if mode not in MODES:
            raise S3Error("InvalidArgument", "Unknown wormMode directive.", ArgumentName="x-amz-object-lock-mode",
                          ArgumentValue=mode)
        ts = parse_date(until, "x-amz-object-lock-retain-until-date")
        if ts <= now:
            raise S3Error("InvalidArgument", "The retain until date must be in the future!",
                          ArgumentName="x-amz-object-lock-retain-until-date", ArgumentValue=until)
        out["lock"] = {"mode": mode, "until": ts}
    elif enabled(bucket) and bucket.settings["object_lock"].get("rule"):
        rule = bucket.settings["object_lock"]["rule"]
        days = rule["days"] if "days" in rule else rule["years"] * 365
        out["lock"] = {"mode": rule["mode"], "until": now + days * DAY}
    if hold is not None:
        if hold not in ("ON", "OFF"):
            raise S3Error("InvalidArgument", "Legal Hold must be either of 'ON' or 'OFF'",
                          ArgumentName="x-amz-object-lock-legal-hold", ArgumentValue=hold)
        if hold == "ON":
            out["hold"] = True
    return out


def strip(meta: dict) -> dict:
    """``meta`` without lock fields (a copy gets its own lock, not its source's)."""
    return {k: v for k, v in meta.items() if k not in ("lock", "hold")}


def headers_for(meta: dict) -> dict[str, str]:
    """GET/HEAD response headers describing a version's lock."""
    out = {}
    lock = meta.get("lock")
    if lock:
        out["x-amz-object-lock-mode"] = lock["mode"]
        out["x-amz-object-lock-retain-until-date"] = iso(lock["until"])
    if "hold" in meta:
        out["x-amz-object-lock-legal-hold"] = "ON" if meta["hold"] else "OFF"
    return out


# -- changes to existing versions -------------------------------------------------------------


def check_delete(rec, bypass_governance: bool, now: float | None = None) -> None:
    """Refuse to delete a locked version (``rec`` None: nothing to protect)."""
    if rec is None or rec.marker:
        return
    if rec.meta.get("hold"):
        raise S3Error("AccessDenied", LOCKED)
    lock = in_force(rec.meta, now)
    if lock and (lock["mode"] == "COMPLIANCE" or not bypass_governance):
        raise S3Error("AccessDenied", LOCKED)


def new_retention(bucket, rec, body: bytes, bypass_governance: bool, now: float | None = None) -> dict:
    """PutObjectRetention: the version's metadata with its new retention (or ``AccessDenied``)."""
    _require(bucket)
    now = time.time() if now is None else now
    root = parse_xml(body)
    if root.tag != "Retention":
        raise S3Error("MalformedXML")
    mode, until = child_text(root, "Mode"), child_text(root, "RetainUntilDate")
    if (mode is None) != (until is None) or (mode is not None and mode not in MODES):
        raise S3Error("MalformedXML", "Retention needs a Mode (GOVERNANCE or COMPLIANCE) and a RetainUntilDate")
    new = None
    if mode is not None:
        ts = parse_date(until, "RetainUntilDate")
        if ts <= now:
            raise S3Error("InvalidArgument", "The retain until date must be in the future!",
                          ArgumentName="RetainUntilDate", ArgumentValue=until)
        new = {"mode": mode, "until": ts}
    old = in_force(rec.meta, now)
    if old is not None:
        # changing the mode either way counts as altering the lock (GOVERNANCE to COMPLIANCE
        # needs the bypass, as on S3; COMPLIANCE never changes)
        weaker = new is None or new["until"] < old["until"] or new["mode"] != old["mode"]
        if weaker and (old["mode"] == "COMPLIANCE" or not bypass_governance):
            raise S3Error("AccessDenied", LOCKED)
    meta = dict(rec.meta)
    if new is None:
        meta.pop("lock", None)
    else:
        meta["lock"] = new
    return meta


def retention_xml(bucket, rec) -> bytes:
    """GetObjectRetention's document."""
    _require(bucket)
    lock = rec.meta.get("lock")
    if not lock:
        raise S3Error("NoSuchObjectLockConfiguration")
    return xml_doc("Retention", el("Mode", lock["mode"]) + el("RetainUntilDate", iso(lock["until"])))


def new_legal_hold(bucket, rec, body: bytes) -> dict:
    """PutObjectLegalHold: the version's metadata with its legal hold ON or OFF."""
    _require(bucket)
    root = parse_xml(body)
    status = child_text(root, "Status")
    if root.tag != "LegalHold" or status not in ("ON", "OFF"):
        raise S3Error("MalformedXML", "LegalHold Status must be ON or OFF")
    meta = dict(rec.meta)
    meta["hold"] = status == "ON"
    return meta


def legal_hold_xml(bucket, rec) -> bytes:
    """GetObjectLegalHold's document."""
    _require(bucket)
    if "hold" not in rec.meta:
        raise S3Error("NoSuchObjectLockConfiguration")
    return xml_doc("LegalHold", el("Status", "ON" if rec.meta["hold"] else "OFF"))
