"""Bucket operations: list/create/delete buckets, location, versioning, object listings."""
from __future__ import annotations

import base64
import json
import time
from functools import lru_cache
from urllib.parse import quote

from . import objectlock
from .access import check_policy_allowed
from .acl import owner_xml
from .acl_ops import apply_create_settings, create_settings
from .buckets import Bucket
from .core import Gateway
from .errors import S3Error, child_text, el, parse_xml, xml_doc, xml_text
from .index import Record
from .lifecycle import name_rules, parse_rules
from .policy import parse_policy
from .request import Request, Response, xml_response
from .tiers import storage_class

MAX_KEYS = 1000


def iso_time(ts: float) -> str:
    """S3's ISO 8601 timestamp with milliseconds."""
    return _iso_second(int(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


@lru_cache(maxsize=4096)
def _iso_second(second: int) -> str:
    # a listing formats one time a key; the objects of a burst share their seconds
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


MAX_BUCKETS = 10000


async def list_buckets(gw: Gateway, req: Request, bucket: None = None) -> Response:
    """ListBuckets: the buckets the signer owns (every bucket for an admin), by name, with
    ``prefix``, ``bucket-region``, and pages of ``max-buckets`` resumed by ``continuation-token``."""
    if not req.auth.user:
        raise S3Error("AccessDenied", "Anonymous users cannot list buckets")
    q = req.query
    prefix = q.get("prefix", "")
    after = ""
    if "continuation-token" in q:
        try:
            after = base64.urlsafe_b64decode(q["continuation-token"].encode()).decode()
        except ValueError:
            raise S3Error("InvalidArgument", "The continuation token provided is incorrect",
                          ArgumentName="continuation-token") from None
    limit = MAX_BUCKETS
    if "max-buckets" in q:
        raw = q["max-buckets"]
        try:
            limit = int(raw)
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_BUCKETS:
            raise S3Error("InvalidArgument", f"max-buckets must be between 1 and {MAX_BUCKETS}",
                          ArgumentName="max-buckets", ArgumentValue=raw)
    region = gw.config["region"]
    wanted_region = q.get("bucket-region")
    names = [n for n in sorted(gw.buckets.buckets) if n.startswith(prefix) and n > after
             and (gw.buckets.buckets[n].owner == req.auth.user or req.auth.admin)
             and wanted_region in (None, region)]
    page, truncated = names[:limit], len(names) > limit
    items = []
    for name in page:
        b = gw.buckets.buckets[name]
        items.append(f"<Bucket>{el('Name', name)}{el('CreationDate', iso_time(b.settings.get('created', 0)))}"
                     f"{el('BucketRegion', region)}</Bucket>")
    body = owner_xml(req.auth.user) + "<Buckets>" + "".join(items) + "</Buckets>"
    if truncated:
        body += el("ContinuationToken", base64.urlsafe_b64encode(page[-1].encode()).decode())
    if "prefix" in q:
        body += el("Prefix", prefix)
    return xml_response(xml_doc("ListAllMyBucketsResult", body))


async def create_bucket(gw: Gateway, req: Request, bucket: None = None) -> Response:
    """CreateBucket (an optional CreateBucketConfiguration must name this gateway's region)."""
    body = await req.body().read_all(64 * 1024)
    region = gw.config["region"]
    if body.strip():
        root = parse_xml(body)
        constraint = child_text(root, "LocationConstraint")
        if constraint and constraint != region:
            raise S3Error("InvalidLocationConstraint",
                          f"This gateway serves region {region!r}, not {constraint!r}")
    settings = create_settings(gw, req)  # ACL and object ownership headers, checked first
    lock = objectlock.enable_at_creation(req.headers)
    try:
        bucket = await gw.run(gw.buckets.create, req.bucket, req.auth.user, region)
    except S3Error as err:
        # us-east-1 (S3's legacy default region) answers a repeated create by the owner with 200
        if err.code != "BucketAlreadyOwnedByYou" or region != "us-east-1":
            raise
    else:
        await apply_create_settings(gw, bucket, settings)
        if lock:  # Object Lock keeps versioning on for good
            await gw.run(bucket.update_settings, {"versioning": "Enabled", "object_lock": {"enabled": True}})
    return Response(200, {"location": f"/{req.bucket}"})


async def delete_bucket(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeleteBucket; ``BucketNotEmpty`` while any version or delete marker is left."""
    await gw.run(gw.buckets.delete, req.bucket)
    return Response(204)


async def head_bucket(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """HeadBucket: the bucket exists and the signer may list it."""
    return Response(200, {"x-amz-bucket-region": gw.config["region"]})


async def location(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetBucketLocation (us-east-1 is reported as empty, as S3 does)."""
    region = gw.config["region"]
    return xml_response(xml_doc("LocationConstraint", "" if region == "us-east-1" else region))


async def get_versioning(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetBucketVersioning."""
    status = el("Status", bucket.versioning) if bucket.versioning else ""
    return xml_response(xml_doc("VersioningConfiguration", status))


async def put_versioning(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutBucketVersioning: Enabled or Suspended."""
    root = parse_xml(await req.body().read_all(64 * 1024))
    status = child_text(root, "Status")
    if status not in ("Enabled", "Suspended"):
        raise S3Error("MalformedXML", "Versioning Status must be Enabled or Suspended")
    if status == "Suspended" and objectlock.enabled(bucket):
        raise S3Error("InvalidBucketState", "An Object Lock configuration is present on this bucket, so the "
                      "versioning state cannot be changed.")
    await gw.run(bucket.set_versioning, status)
    return Response(200)


async def put_lifecycle(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutBucketLifecycleConfiguration (see :mod:`.lifecycle` for the supported actions)."""
    body = await req.body().read_all(256 * 1024)
    rules = parse_rules(body, gw.cold.root if gw.cold else None, gw.no_tier)
    xml = name_rules(body.decode(), rules)
    await gw.run(bucket.set_setting, "lifecycle", {"rules": rules, "xml": xml})
    return Response(200)


async def delete_lifecycle(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeleteBucketLifecycle."""
    await gw.run(bucket.set_setting, "lifecycle", None)
    return Response(204)


async def get_lifecycle(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetBucketLifecycleConfiguration: the document as it was put."""
    lifecycle = bucket.settings.get("lifecycle")
    if not lifecycle:
        raise S3Error("NoSuchLifecycleConfiguration", BucketName=bucket.name)
    return xml_response(lifecycle["xml"].encode())


async def put_policy(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutBucketPolicy (the subset :mod:`.policy` evaluates)."""
    doc = parse_policy(await req.body().read_all(1024 * 1024), bucket.name)
    check_policy_allowed(bucket, doc)  # BlockPublicPolicy
    await gw.run(bucket.set_setting, "policy", doc)
    return Response(204)


async def delete_policy(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeleteBucketPolicy."""
    await gw.run(bucket.set_setting, "policy", None)
    return Response(204)


async def get_policy(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetBucketPolicy."""
    doc = bucket.settings.get("policy")
    if not doc:
        raise S3Error("NoSuchBucketPolicy", BucketName=bucket.name)
    return Response(200, {"content-type": "application/json"}, json.dumps(doc).encode())


def _max_keys(req: Request, name: str = "max-keys") -> int:
    raw = req.query.get(name, str(MAX_KEYS))
    try:
        value = int(raw)
    except ValueError:
        raise S3Error("InvalidArgument", f"{name} must be an integer", ArgumentName=name, ArgumentValue=raw) from None
    if value < 0:
        raise S3Error("InvalidArgument", f"{name} must not be negative", ArgumentName=name, ArgumentValue=raw)
    return min(value, MAX_KEYS)


def _encoder(req: Request):
    enc = req.query.get("encoding-type")
    if enc not in (None, "url"):
        raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request", ArgumentName="encoding-type")
    return (lambda s: quote(s, safe="/")) if enc == "url" else (lambda s: s)


def collect(cursor, prefix: str, delimiter: str, after: str, limit: int):
    """Walk a merged cursor: (records, common prefixes, truncated, last key or prefix returned)."""
    records: list[Record] = []
    prefixes: list[str] = []
    last = ""
    truncated = False
    for rec in cursor:
        if delimiter:
            idx = rec.key.find(delimiter, len(prefix))
            if idx >= 0:
                cp = rec.key[: idx + len(delimiter)]
                if after and cp <= after:
                    cursor.skip_past(cp)
                    continue
                if len(records) + len(prefixes) >= limit:
                    truncated = True
                    break
                prefixes.append(cp)
                last = cp
                cursor.skip_past(cp)
                continue
        if len(records) + len(prefixes) >= limit:
            truncated = True
            break
        records.append(rec)
        last = rec.key
    return records, prefixes, truncated, last


def _contents(records: list[Record], enc, owner: str | None) -> str:
    """The <Contents> of a listing: only the key (and an owner) is escaped, the other values
    are the gateway's own (a timestamp, a hex ETag, a size, a storage class name)."""
    out = []
    for r in records:
        out.append(f"<Contents><Key>{xml_text(enc(r.key))}</Key><LastModified>{iso_time(r.mtime)}</LastModified>"
                   f"<ETag>\"{r.etag}\"</ETag><Size>{r.size}</Size>"
                   f"<StorageClass>{storage_class(r)}</StorageClass>"
                   + (owner_xml(r.meta.get("ow") or owner) if owner else "") + "</Contents>")
    return "".join(out)


async def list_objects(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """ListObjects (v1) and ListObjectsV2 (``list-type=2``)."""
    q = req.query
    v2 = q.get("list-type") == "2"
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    if delimiter and q.get("allow-unordered", "").lower() == "true":
        # radosgw's extension (clients written for it send it): our listing is always in key
        # order, which an unordered one may be; like radosgw, it cannot go with a delimiter
        raise S3Error("InvalidArgument", "allow-unordered cannot be used with a delimiter",
                      ArgumentName="allow-unordered")
    limit = _max_keys(req)
    enc = _encoder(req)
    if v2:
        token = q.get("continuation-token")
        if token is not None:
            try:
                after = base64.urlsafe_b64decode(token.encode()).decode()
            except ValueError:
                raise S3Error("InvalidArgument", "The continuation token provided is incorrect",
                              ArgumentName="continuation-token") from None
        else:
            after = q.get("start-after", "")
    else:
        after = q.get("marker", "")
    records, prefixes, truncated, last = await gw.run(
        lambda: collect(bucket.index.iter_current(prefix, after, expect=limit), prefix, delimiter, after, limit)
        if limit else ([], [], False, ""))
    # ListObjects (v1) returns the prefix as sent even with encoding-type=url, as S3 does
    # (clients decode only Delimiter, Marker, NextMarker and keys there)
    parts = [el("Name", bucket.name), el("Prefix", enc(prefix) if v2 else prefix)]
    if v2:
        if "continuation-token" in q:
            parts.append(el("ContinuationToken", q["continuation-token"]))
        if "start-after" in q:
            parts.append(el("StartAfter", enc(q["start-after"])))
        parts.append(el("KeyCount", len(records) + len(prefixes)))
        if truncated:
            parts.append(el("NextContinuationToken", base64.urlsafe_b64encode(last.encode()).decode()))
    else:
        parts.append(el("Marker", enc(after)))
        if truncated:
            parts.append(el("NextMarker", enc(last)))
    parts.append(el("MaxKeys", limit))
    if delimiter:
        parts.append(el("Delimiter", enc(delimiter)))
    if "encoding-type" in q:
        parts.append(el("EncodingType", "url"))
    parts.append(el("IsTruncated", truncated))
    owner = bucket.owner if (not v2 or q.get("fetch-owner") == "true") else None
    parts.append(_contents(records, enc, owner))
    parts.extend(f"<CommonPrefixes>{el('Prefix', enc(p))}</CommonPrefixes>" for p in prefixes)
    return xml_response(xml_doc("ListBucketResult", "".join(parts)))


def _marker_seq(bucket: Bucket, key: str, version_id: str) -> int:
    """Where a listing resumes after version ``version_id`` of ``key``, also when that version
    is gone (deleted between pages): version ids carry their sequence number; a missing null
    version resumes at the key's newest version left."""
    rec = bucket.index.get(key, version_id)
    if rec is not None:
        return rec.seq
    head, dot, tail = version_id.partition(".")
    if head.isdigit() and dot and len(tail) == 8:
        return int(head)
    if version_id == "null":
        return (1 << 63) - 1
    raise S3Error("InvalidArgument", "Invalid version id specified", ArgumentName="version-id-marker",
                  ArgumentValue=version_id)


async def list_versions(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """ListObjectVersions, newest version first within each key."""
    q = req.query
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    key_marker, vid_marker = q.get("key-marker", ""), q.get("version-id-marker", "")
    limit = _max_keys(req)
    enc = _encoder(req)

    if vid_marker and not key_marker:
        raise S3Error("InvalidArgument", "A version-id marker cannot be specified without a key marker.",
                      ArgumentName="version-id-marker", ArgumentValue=vid_marker)

    def run():
        after_seq = None
        if key_marker and vid_marker:
            after_seq = _marker_seq(bucket, key_marker, vid_marker)
        cursor = bucket.index.iter_versions(prefix, key_marker, after_seq, expect=limit)
        return collect(cursor, prefix, delimiter, key_marker if after_seq is None else "", limit)

    records, prefixes, truncated, _ = await gw.run(run) if limit else ([], [], False, "")
    parts = [el("Name", bucket.name), el("Prefix", enc(prefix)), el("KeyMarker", enc(key_marker)),
             el("VersionIdMarker", vid_marker)]
    if truncated:
        if records and (not prefixes or records[-1].key > prefixes[-1]):
            parts += [el("NextKeyMarker", enc(records[-1].key)), el("NextVersionIdMarker", records[-1].version_id)]
        elif prefixes:
            parts.append(el("NextKeyMarker", enc(prefixes[-1])))
    parts.append(el("MaxKeys", limit))
    if delimiter:
        parts.append(el("Delimiter", enc(delimiter)))
    if "encoding-type" in q:
        parts.append(el("EncodingType", "url"))
    parts.append(el("IsTruncated", truncated))
    for r in records:
        common = (el("Key", enc(r.key)) + el("VersionId", r.version_id) + el("IsLatest", r.latest)
                  + el("LastModified", iso_time(r.mtime)))
        if r.marker:
            parts.append(f"<DeleteMarker>{common}{owner_xml(r.meta.get('ow') or bucket.owner)}</DeleteMarker>")
        else:
            parts.append(f"<Version>{common}{el('ETag', chr(34) + r.etag + chr(34))}{el('Size', r.size)}"
                         f"{el('StorageClass', storage_class(r))}"
                         f"{owner_xml(r.meta.get('ow') or bucket.owner)}</Version>")
    parts.extend(f"<CommonPrefixes>{el('Prefix', enc(p))}</CommonPrefixes>" for p in prefixes)
    return xml_response(xml_doc("ListVersionsResult", "".join(parts)))
