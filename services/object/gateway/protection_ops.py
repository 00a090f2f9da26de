"""Encryption and Object Lock operations: bucket default encryption (Put/Get/Delete
BucketEncryption), Put/GetObjectLockConfiguration, Put/GetObjectRetention and
Put/GetObjectLegalHold. The rules live in :mod:`.sse` and :mod:`.objectlock`."""
from __future__ import annotations

from . import objectlock, sse
from .access import may_bypass_governance
from .buckets import Bucket
from .core import Gateway
from .errors import S3Error
from .index import Op
from .object_ops import lookup
from .request import Request, Response, xml_response

MAX_DOCUMENT = 64 * 1024


async def put_encryption(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutBucketEncryption: the default encryption of new objects that ask for none."""
    setting = sse.parse_bucket_encryption(await req.body().read_all(MAX_DOCUMENT), gw.keyring)
    await gw.run(bucket.set_setting, "encryption", setting)
    return Response(200)


async def get_encryption(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetBucketEncryption (``ServerSideEncryptionConfigurationNotFoundError`` without one)."""
    setting = bucket.settings.get("encryption")
    if not setting:
        raise S3Error("ServerSideEncryptionConfigurationNotFoundError", BucketName=bucket.name)
    return xml_response(sse.bucket_encryption_xml(setting))


async def delete_encryption(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeleteBucketEncryption: new objects are stored unencrypted again (existing ones stay)."""
    await gw.run(bucket.set_setting, "encryption", None)
    return Response(204)


async def put_lock_configuration(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutObjectLockConfiguration (also turns Object Lock on for a versioned bucket)."""
    setting = objectlock.parse_configuration(await req.body().read_all(MAX_DOCUMENT), bucket)
    await gw.run(bucket.set_setting, "object_lock", setting)
    return Response(200)


async def get_lock_configuration(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetObjectLockConfiguration."""
    return xml_response(objectlock.configuration_xml(bucket))


async def _set_meta(gw: Gateway, bucket: Bucket, rec, meta: dict) -> Response:
    res = await gw.commit(bucket, Op("set_meta", key=rec.key, version_id=rec.version_id, meta=meta))
    if not res.found:
        raise S3Error("NoSuchVersion", Key=rec.key, VersionId=rec.version_id)
    return Response(200, {"x-amz-version-id": rec.version_id} if bucket.versioning else {})


async def put_retention(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutObjectRetention (shortening or removing needs what :mod:`.objectlock` says)."""
    body = await req.body().read_all(MAX_DOCUMENT)
    rec = await lookup(gw, bucket, req.key, req.query.get("versionId") or None)
    meta = objectlock.new_retention(bucket, rec, body, may_bypass_governance(req, bucket, rec.key, rec.version_id))
    return await _set_meta(gw, bucket, rec, meta)


async def get_retention(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetObjectRetention."""
    rec = await lookup(gw, bucket, req.key, req.query.get("versionId") or None)
    return xml_response(objectlock.retention_xml(bucket, rec))


async def put_legal_hold(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutObjectLegalHold."""
    body = await req.body().read_all(MAX_DOCUMENT)
    rec = await lookup(gw, bucket, req.key, req.query.get("versionId") or None)
    return await _set_meta(gw, bucket, rec, objectlock.new_legal_hold(bucket, rec, body))


async def get_legal_hold(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetObjectLegalHold."""
    rec = await lookup(gw, bucket, req.key, req.query.get("versionId") or None)
    return xml_response(objectlock.legal_hold_xml(bucket, rec))


# -- the admin interface's view (the plane's bucket settings) -----------------------------------


def admin_info(bucket: Bucket) -> dict:
    """A bucket's encryption and Object Lock settings, as the admin interface reports them:
    ``{"encryption": null | {"algorithm", "kms_key_id"}, "object_lock": null | {"mode", "days"}}``."""
    enc = bucket.settings.get("encryption")
    lock = bucket.settings.get("object_lock") if objectlock.enabled(bucket) else None
    rule = (lock or {}).get("rule") or {}
    days = rule.get("days", rule.get("years", 0) * 365) or None
    return {"encryption": {"algorithm": enc["alg"], "kms_key_id": enc.get("kid_given") or enc.get("kid")}
            if enc else None,
            "object_lock": {"mode": rule.get("mode"), "days": days} if lock else None}


async def admin_set_encryption(gw: Gateway, bucket: Bucket, data: dict) -> dict:
    """``{"algorithm": "AES256" | "aws:kms" | null, ["kms_key_id"]}`` (null: no default)."""
    alg, kid = data.get("algorithm"), data.get("kms_key_id")
    if alg is None:
        await gw.run(bucket.set_setting, "encryption", None)
        return admin_info(bucket)
    if alg not in ("AES256", "aws:kms") or (kid is not None and (alg != "aws:kms" or not isinstance(kid, str))):
        raise S3Error("InvalidArgument", "encryption 'algorithm' must be AES256 or aws:kms (or null), and "
                      "'kms_key_id' a key id with aws:kms only")
    gw.keyring.kek(b"sse-s3")  # refused without a master key
    setting = {"alg": alg}
    if kid:
        setting.update(kid=gw.keyring.kms_id(kid), kid_given=kid)
    await gw.run(bucket.set_setting, "encryption", setting)
    return admin_info(bucket)


async def admin_set_lock(gw: Gateway, bucket: Bucket, data: dict) -> dict:
    """``{"mode": "GOVERNANCE" | "COMPLIANCE" | null, "days": N | null}``: turn Object Lock on
    (versioning must be Enabled) with this default retention (none when mode is null)."""
    mode, days = data.get("mode"), data.get("days")
    if mode is not None and (mode not in objectlock.MODES or isinstance(days, bool) or not isinstance(days, int)
                             or days <= 0):
        raise S3Error("InvalidArgument", "object lock 'mode' must be GOVERNANCE or COMPLIANCE with a positive "
                      "number of 'days' (or null for no default retention)")
    if not objectlock.enabled(bucket) and bucket.versioning != "Enabled":
        raise S3Error("InvalidBucketState", "Versioning must be 'Enabled' on the bucket to apply a Object Lock "
                      "configuration")
    setting = {"enabled": True}
    if mode is not None:
        setting["rule"] = {"mode": mode, "days": days}
    await gw.run(bucket.set_setting, "object_lock", setting)
    return admin_info(bucket)
