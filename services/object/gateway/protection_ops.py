"""Encryption and Object Lock operations: bucket default encryption (Put/Get/Delete
BucketEncryption), Put/GetObjectLockConfiguration, Put/GetObjectRetention and
Put/GetObjectLegalHold. The rules live in :mod:`.sse` and :mod:`.objectlock`."""
from __future__ import annotations

from . import objectlock, sse
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


def get_encryption(bucket: Bucket) -> Response:
    """GetBucketEncryption (``ServerSideEncryptionConfigurationNotFoundError`` without one)."""
    setting = bucket.settings.get("encryption")
    if not setting:
        raise S3Error("ServerSideEncryptionConfigurationNotFoundError", BucketName=bucket.name)
    return xml_response(sse.bucket_encryption_xml(setting))


async def delete_encryption(gw: Gateway, bucket: Bucket) -> Response:
    """DeleteBucketEncryption: new objects are stored unencrypted again (existing ones stay)."""
    await gw.run(bucket.set_setting, "encryption", None)
    return Response(204)


async def put_lock_configuration(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutObjectLockConfiguration (also turns Object Lock on for a versioned bucket)."""
    setting = objectlock.parse_configuration(await req.body().read_all(MAX_DOCUMENT), bucket)
    await gw.run(bucket.set_setting, "object_lock", setting)
    return Response(200)


def get_lock_configuration(bucket: Bucket) -> Response:
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
    meta = objectlock.new_retention(bucket, rec, body, objectlock.bypass(req.headers))
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
