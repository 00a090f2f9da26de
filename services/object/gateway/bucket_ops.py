"""Bucket operations: list/create/delete buckets, location, versioning, object listings."""
from __future__ import annotations

import base64
import json
import time
from urllib.parse import quote

from . import objectlock
from .buckets import Bucket
from .core import Gateway
from .errors import S3Error, child_text, el, parse_xml, xml_doc
from .index import Record
from .lifecycle import parse_rules
from .policy import parse_policy
from .request import Request, Response, xml_response

MAX_KEYS = 1000


def iso_time(ts: float) -> str:
    """S3's ISO 8601 timestamp with milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}Z"


def owner_xml(name: str) -> str:
    """An <Owner> element for ``name``."""
    return f"<Owner>{el('ID', name)}{el('DisplayName', name)}</Owner>"


async def list_buckets(gw: Gateway, req: Request) -> Response:
    """ListBuckets: the buckets the signer owns (every bucket for an admin)."""
    items = []
    for name in sorted(gw.buckets.buckets):
        b = gw.buckets.buckets[name]
        if b.owner == req.auth.user or req.auth.admin:
            items.append(f"<Bucket>{el('Name', name)}{el('CreationDate', iso_time(b.settings.get('created', 0)))}"
                         f"{el('BucketRegion', gw.config['region'])}</Bucket>")
    return xml_response(xml_doc("ListAllMyBucketsResult", owner_xml(req.auth.user) + "<Buckets>" + "".join(items)
                                + "</Buckets>"))


async def create_bucket(gw: Gateway, req: Request) -> Response:
    """CreateBucket (an optional CreateBucketConfiguration must name this gateway's region)."""
    body = await req.body().read_all(64 * 1024)
    region = gw.config["region"]
    if body.strip():
        root = parse_xml(body)
        constraint = child_text(root, "LocationConstraint")
        if constraint and constraint != region:
            raise S3Error("InvalidLocationConstraint",
                          f"This gateway serves region {region!r}, not {constraint!r}")
    lock = objectlock.enable_at_creation(req.headers)
    bucket = await gw.run(gw.buckets.create, req.bucket, req.auth.user, region)
    if lock:  # Object Lock keeps versioning on for good
        bucket.settings["versioning"] = "Enabled"
        await gw.run(bucket.set_setting, "object_lock", {"enabled": True})
    return Response(200, {"location": f"/{req.bucket}"})


async def delete_bucket(gw: Gateway, req: Request) -> Response:
    """DeleteBucket; ``BucketNotEmpty`` while any version or delete marker is left."""
    await gw.run(gw.buckets.delete, req.bucket)
    return Response(204)


def location(gw: Gateway, req: Request) -> Response:
    """GetBucketLocation (us-east-1 is reported as empty, as S3 does)."""
    region = gw.config["region"]
    return xml_response(xml_doc("LocationConstraint", "" if region == "us-east-1" else region))


def get_versioning(bucket: Bucket) -> Response:
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
    rules = parse_rules(body, gw.cold.root)
    await gw.run(bucket.set_setting, "lifecycle", {"rules": rules, "xml": body.decode()})
    return Response(200)


def get_lifecycle(bucket: Bucket) -> Response:
    """GetBucketLifecycleConfiguration: the document as it was put."""
    lifecycle = bucket.settings.get("lifecycle")
    if not lifecycle:
        raise S3Error("NoSuchLifecycleConfiguration", BucketName=bucket.name)
    return xml_response(lifecycle["xml"].encode())


async def put_policy(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutBucketPolicy (the subset :mod:`.policy` evaluates)."""
    doc = parse_policy(await req.body().read_all(20 * 1024), bucket.name)
    await gw.run(bucket.set_setting, "policy", doc)
    return Response(204)


def get_policy(bucket: Bucket) -> Response:
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
    out = []
    for r in records:
        out.append("<Contents>" + el("Key", enc(r.key)) + el("LastModified", iso_time(r.mtime))
                   + el("ETag", f'"{r.etag}"') + el("Size", r.size)
                   + el("StorageClass", r.meta.get("sc", "STANDARD")) + (owner_xml(owner) if owner else "") + "</Contents>")
    return "".join(out)


async def list_objects(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """ListObjects (v1) and ListObjectsV2 (``list-type=2``)."""
    q = req.query
    v2 = q.get("list-type") == "2"
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
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
        lambda: collect(bucket.index.iter_current(prefix, after), prefix, delimiter, after, limit)
        if limit else ([], [], False, ""))
    parts = [el("Name", bucket.name), el("Prefix", enc(prefix))]
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


async def list_versions(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """ListObjectVersions, newest version first within each key."""
    q = req.query
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    key_marker, vid_marker = q.get("key-marker", ""), q.get("version-id-marker", "")
    limit = _max_keys(req)
    enc = _encoder(req)

    def run():
        after_seq = None
        if key_marker and vid_marker:
            rec = bucket.index.get(key_marker, vid_marker)
            if rec is None:
                raise S3Error("InvalidArgument", "Invalid version id specified", ArgumentName="version-id-marker")
            after_seq = rec.seq
        cursor = bucket.index.iter_versions(prefix, key_marker, after_seq)
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
            parts.append(f"<DeleteMarker>{common}{owner_xml(bucket.owner)}</DeleteMarker>")
        else:
            parts.append(f"<Version>{common}{el('ETag', chr(34) + r.etag + chr(34))}{el('Size', r.size)}"
                         f"{el('StorageClass', r.meta.get('sc', 'STANDARD'))}{owner_xml(bucket.owner)}</Version>")
    parts.extend(f"<CommonPrefixes>{el('Prefix', enc(p))}</CommonPrefixes>" for p in prefixes)
    return xml_response(xml_doc("ListVersionsResult", "".join(parts)))
