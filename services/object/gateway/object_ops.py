"""Object operations: put, get/head (ranges, conditions), delete, multi-delete, copy, tagging."""
from __future__ import annotations

import base64
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl, unquote

from . import objectlock, sse
from .bucket_ops import iso_time
from .buckets import Bucket
from .checksums import check_required_digest
from .core import Gateway
from .errors import S3Error, child_text, el, parse_xml, xml_doc
from .index import Op, Record
from .lifecycle import add_expiration
from .access import check_access, check_foreign_object, may_bypass_governance, new_object_acl
from .request import Request, Response, xml_response
from .storage import remove_location
from .tiers import STANDARD, check_readable, check_write_class, parse_restore_days, part_sizes, storage_class

MAX_TAGS = 10
META_HEADERS = {"content-type": "ct", "content-encoding": "ce", "content-disposition": "cd",
                "cache-control": "cc", "content-language": "cl", "expires": "ex"}
RESPONSE_OVERRIDES = {"response-content-type": "content-type", "response-content-language": "content-language",
                      "response-expires": "expires", "response-cache-control": "cache-control",
                      "response-content-disposition": "content-disposition",
                      "response-content-encoding": "content-encoding"}


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


_http_dates: dict[int, str] = {}


def http_date(ts: float) -> str:
    """RFC 7231 date (what ``email.utils.formatdate(ts, usegmt=True)`` says, for less CPU):
    formatted once per second of time, as objects written together share their seconds."""
    sec = int(ts)
    if 0 <= sec and ts - sec < 0.999999:  # rounding to the microsecond cannot carry into the next second
        text = _http_dates.get(sec)
        if text is None:
            if len(_http_dates) >= 4096:
                _http_dates.clear()
            text = _http_dates[sec] = _format_http_date(sec)
        return text
    return _format_http_date(ts)


def _format_http_date(ts: float) -> str:
    t = datetime.fromtimestamp(ts, timezone.utc)  # rounded to the microsecond, as formatdate does
    return (f"{_DAYS[t.weekday()]}, {t.day:02d} {_MONTHS[t.month - 1]} {t.year:04d} "
            f"{t.hour:02d}:{t.minute:02d}:{t.second:02d} GMT")


def meta_from_headers(headers: dict[str, str]) -> dict:
    """Stored metadata (system headers and x-amz-meta-*) from request headers."""
    meta: dict = {"ct": headers.get("content-type") or "binary/octet-stream"}
    for header, short in META_HEADERS.items():
        if header != "content-type" and header in headers:
            meta[short] = headers[header]
    if "ce" in meta and "aws-chunked" in meta["ce"]:
        # aws-chunked frames this request only; any other coding is stored as sent
        encs = [e.strip() for e in meta["ce"].split(",") if e.strip() and e.strip() != "aws-chunked"]
        if encs:
            meta["ce"] = ",".join(encs)
        else:
            del meta["ce"]
    meta["um"] = {k[11:]: _metadata_text(v) for k, v in headers.items() if k.startswith("x-amz-meta-")}
    if "x-amz-tagging" in headers:
        meta["tags"] = parse_tag_header(headers["x-amz-tagging"])
    return meta


def _metadata_text(value: str) -> str:
    """A metadata value as text: headers arrive as bytes read as latin-1, and clients send
    non-ASCII text as UTF-8 (S3 stores it decoded and answers it RFC 2047-encoded)."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def parse_tag_header(value: str) -> dict:
    """Tags from an ``x-amz-tagging`` query-string header."""
    pairs = parse_qsl(value, keep_blank_values=True)
    tags = dict(pairs)
    if len(tags) != len(pairs):
        raise S3Error("InvalidTag", "Cannot provide multiple Tags with the same key")
    _check_tags(tags)
    return tags


def _check_tags(tags: dict) -> None:
    if len(tags) > MAX_TAGS:
        raise S3Error("InvalidTag", f"Object tags cannot be greater than {MAX_TAGS}")
    for k, v in tags.items():
        if not k or len(k) > 128 or len(v) > 256:
            raise S3Error("InvalidTag", f"Tag {k!r} has an invalid key or value length")


def object_headers(rec: Record, versioned: bool, keyring: sse.Keyring | None = None) -> dict[str, str]:
    """Response headers describing a stored version."""
    m = rec.meta
    h = {"etag": f'"{rec.etag}"', "last-modified": http_date(rec.mtime), "accept-ranges": "bytes",
         "content-type": m.get("ct", "binary/octet-stream")}
    sc = storage_class(rec)
    if sc != STANDARD:  # S3 names every storage class but STANDARD
        h["x-amz-storage-class"] = sc
    for header, short in META_HEADERS.items():
        if short in m and header != "content-type":
            h[header] = m[short]
    for k, v in m.get("um", {}).items():
        h[f"x-amz-meta-{k}"] = v if v.isascii() else "=?UTF-8?B?" + base64.b64encode(v.encode()).decode() + "?="
    if m.get("tags"):
        h["x-amz-tagging-count"] = str(len(m["tags"]))
    if versioned or rec.version_id != "null":
        h["x-amz-version-id"] = rec.version_id
    sizes = part_sizes(rec.loc)
    if sizes is not None:
        h["x-amz-mp-parts-count"] = str(len(sizes))
    h.update(sse.headers_for(m.get("sse"), keyring=keyring))
    h.update(objectlock.headers_for(m))
    return h


def _etag_matches(header: str, etag: str) -> bool:
    return any(t.strip() in ("*", f'"{etag}"', etag) for t in header.split(","))


def _parse_http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def check_conditions(headers: dict[str, str], rec: Record, prefix: str = "", copy: bool = False) -> None:
    """If-Match / If-None-Match / If-(Un)Modified-Since, raising 412 or 304 as S3 does."""
    if_match = headers.get(prefix + "if-match")
    if_none = headers.get(prefix + "if-none-match")
    since = _parse_http_date(headers.get(prefix + "if-modified-since"))
    unmod = _parse_http_date(headers.get(prefix + "if-unmodified-since"))
    mtime = int(rec.mtime)
    if if_match is not None and not _etag_matches(if_match, rec.etag):
        raise S3Error("PreconditionFailed", Condition=f"{prefix}If-Match")
    if unmod is not None and if_match is None and mtime > unmod:
        raise S3Error("PreconditionFailed", Condition=f"{prefix}If-Unmodified-Since")
    not_modified = "PreconditionFailed" if copy else "NotModified"
    if if_none is not None and _etag_matches(if_none, rec.etag):
        raise S3Error(not_modified, Condition=f"{prefix}If-None-Match", headers={"etag": f'"{rec.etag}"'})
    if since is not None and if_none is None and mtime <= since:
        raise S3Error(not_modified, Condition=f"{prefix}If-Modified-Since", headers={"etag": f'"{rec.etag}"'})


def write_conditions(bucket: Bucket, key: str, headers: dict[str, str]) -> dict:
    """The conditional-write headers of a PutObject or CompleteMultipartUpload (If-None-Match: *,
    If-Match: ETAG) as :class:`.index.Op` fields, after a first check against the current object
    (the commit checks again, atomically: see :func:`raise_precondition`)."""
    if_none, if_match = headers.get("if-none-match"), headers.get("if-match")
    if if_none is None and if_match is None:
        return {}
    if if_none is not None and if_none.strip() != "*":
        raise S3Error("NotImplemented", "If-None-Match on writes takes only '*'")
    current = bucket.index.get(key, None)
    exists = current is not None and not current.marker
    if if_none is not None and exists:
        raise S3Error("PreconditionFailed", Condition="If-None-Match")
    out: dict = {"if_none_match": if_none is not None}
    if if_match is not None:
        if not exists:
            raise S3Error("NoSuchKey", Key=key)
        if not _etag_matches(if_match, current.etag):
            raise S3Error("PreconditionFailed", Condition="If-Match")
        out["if_match"] = current.etag
    return out


def raise_precondition(outcome: str, conditions: dict) -> None:
    """The error of a conditional write that lost at commit: a concurrent write made its
    condition false (412), or deleted the object it was to replace (409)."""
    if outcome == "conflict":
        raise S3Error("ConditionalRequestConflict")
    raise S3Error("PreconditionFailed", Condition="If-None-Match" if conditions.get("if_none_match") else "If-Match")


def parse_range(value: str | None, size: int) -> tuple[int, int] | None:
    """(start, end exclusive) for a single ``bytes=`` range; None means the whole object."""
    if not value or not value.startswith("bytes=") or "," in value:
        return None
    first, sep, last = value[6:].strip().partition("-")
    if not sep:
        return None
    try:
        if first == "":
            n = int(last)
            if n < 0:
                return None
            if n == 0:
                raise S3Error("InvalidRange", headers={"content-range": f"bytes */{size}"}, ActualObjectSize=str(size))
            return max(0, size - n), size
        start = int(first)
        end = int(last) + 1 if last else size
    except ValueError:
        return None  # malformed ranges are ignored, as HTTP says
    if start < 0 or (last and end <= start):
        return None
    if start >= size:
        raise S3Error("InvalidRange", headers={"content-range": f"bytes */{size}"},
                      RangeRequested=value, ActualObjectSize=str(size))
    return start, min(end, size)


def _version_query(req: Request) -> str | None:
    vid = req.query.get("versionId")
    return vid if vid else None


async def lookup(gw: Gateway, bucket: Bucket, key: str, version_id: str | None, method: str = "GET") -> Record:
    """The requested version, or the S3 error a GET of it gets."""
    # a point lookup in a WAL database is tens of microseconds: cheaper inline than via a thread
    rec = bucket.index.get(key, version_id)
    if rec is None:
        if version_id is not None:
            raise S3Error("NoSuchVersion", resource=f"/{bucket.name}/{key}", Key=key, VersionId=version_id)
        raise S3Error("NoSuchKey", resource=f"/{bucket.name}/{key}", Key=key)
    if rec.marker:
        headers = {"x-amz-delete-marker": "true", "x-amz-version-id": rec.version_id,
                   "last-modified": http_date(rec.mtime)}
        if version_id is not None:
            raise S3Error("MethodNotAllowed", headers=headers)
        raise S3Error("NoSuchKey", resource=f"/{bucket.name}/{key}", headers=headers, Key=key)
    return rec


async def put_object(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutObject: durable (data and index entry fsynced) before the 200."""
    headers = req.headers
    body = req.body()
    if body.size is None:
        raise S3Error("MissingContentLength")
    conditions = write_conditions(bucket, req.key, headers)
    check_write_class(headers)
    bucket.check_quota(body.size)
    meta = new_object_acl(gw, req, bucket, meta_from_headers(headers))
    meta.update(objectlock.for_new_version(bucket, headers))
    wk = sse.for_write(gw.keyring, headers, bucket)
    cipher = wk.cipher() if wk else None
    stored = await gw.store_body(bucket, body, headers, cipher=cipher, defer=True)
    meta["ck"] = stored.checksums
    if wk:
        meta["sse"] = wk.meta(cipher.np)
    rec = gw.make_record(bucket, req.key, stored, sse.etag_for(wk, stored.md5_hex), meta)
    result = await gw.commit(bucket, Op("put", rec, versioned=bucket.versioning == "Enabled", **conditions),
                             stored.commit_data)
    if result.precondition:
        if not stored.in_segment:
            await gw.run(remove_location, stored.loc)
        raise_precondition(result.precondition, conditions)
    out = {"etag": f'"{rec.etag}"', **(wk.headers() if wk else {})}
    if bucket.versioning == "Enabled":  # a suspended bucket's null version is not named (as S3 answers)
        out["x-amz-version-id"] = rec.version_id
    for algo, value in stored.checksums.items():
        out[f"x-amz-checksum-{algo}"] = value
    add_expiration(gw, bucket, rec, out)
    return Response(200, out)


async def get_object(gw: Gateway, req: Request, bucket: Bucket, retry: bool = True) -> Response:
    """GetObject / HeadObject with Range, conditions and response-* overrides."""
    sse.refuse_on_read(req.headers)
    rec = await lookup(gw, bucket, req.key, _version_query(req), req.method)
    check_foreign_object(req, bucket, rec.meta, "s3:GetObjectVersion" if "versionId" in req.query else "s3:GetObject",
                         req.key)
    ckey = sse.check_read(gw.keyring, rec.meta, req.headers)
    check_conditions(req.headers, rec)
    if req.method == "GET":
        check_readable(rec)  # an archive class needs RestoreObject first
    headers = object_headers(rec, bool(bucket.versioning), gw.keyring)
    if ckey:
        headers[sse.CUSTOMER + "key-md5"] = ckey.md5
    if "versionId" not in req.query:
        add_expiration(gw, bucket, rec, headers)
    restore = gw.cold.restore_header(bucket, rec) if rec.tier != "hot" else None
    if restore:
        headers["x-amz-restore"] = restore
    rng = parse_range(req.headers.get("range"), rec.size)
    checksum_mode = req.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED"
    if "partNumber" in req.query:
        rng = part_range(req, rec, headers)
        if rng is not None and checksum_mode:
            headers.update(part_checksum_headers(rec, int(req.query["partNumber"])))
    if req.query:
        for q, header in RESPONSE_OVERRIDES.items():
            if q in req.query:
                headers[header] = req.query[q]
    status = 200
    start, end = 0, rec.size
    if rng is not None:
        start, end = rng
        status = 206
        headers["content-range"] = f"bytes {start}-{end - 1}/{rec.size}"
    elif checksum_mode:
        for algo, value in rec.meta.get("ck", {}).items():
            headers[f"x-amz-checksum-{algo}"] = value
            headers["x-amz-checksum-type"] = "COMPOSITE" if "-" in value else "FULL_OBJECT"
    headers["content-length"] = str(end - start)
    if req.method == "HEAD":
        return Response(status, headers, b"")
    try:
        stream = await gw.open_reader(rec, start, end, ckey, zero_copy=req.zero_copy)
    except FileNotFoundError:
        # overwritten and its files removed between the index read and the open: start again
        if retry:
            return await get_object(gw, req, bucket, retry=False)
        raise
    return Response(status, headers, stream)


def part_range(req: Request, rec: Record, headers: dict) -> tuple[int, int] | None:
    """Bytes of part ``?partNumber=N`` of a multipart object (None: the whole of a single-part
    object, which is its part 1); ``x-amz-mp-parts-count`` says how many parts there are."""
    raw = req.query["partNumber"]
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= 10000:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive",
                      ArgumentName="partNumber", ArgumentValue=raw)
    if "range" in req.headers:
        raise S3Error("InvalidRequest", "Cannot specify both Range header and partNumber query parameter")
    sizes = part_sizes(rec.loc)
    if sizes is None:
        if n != 1:
            raise S3Error("InvalidPartNumber", PartNumberRequested=str(n), ActualPartCount="1")
        return None
    if n > len(sizes):
        raise S3Error("InvalidPartNumber", PartNumberRequested=str(n), ActualPartCount=str(len(sizes)))
    start = sum(sizes[: n - 1])
    headers["x-amz-mp-parts-count"] = str(len(sizes))
    return start, start + sizes[n - 1]


def part_checksum_headers(rec: Record, number: int) -> dict[str, str]:
    """The checksums of part ``number`` of a multipart object, of the algorithms the object has
    a checksum of, as S3 answers GET/HEAD ``?partNumber=N`` with checksum mode on (the value
    is that part's own, so a client can check the part's bytes against it)."""
    part_checks = rec.meta.get("pck") or []
    if number > len(part_checks):
        return {}
    out = {}
    for algo, whole in rec.meta.get("ck", {}).items():
        value = part_checks[number - 1].get(algo)
        if value:
            out[f"x-amz-checksum-{algo}"] = value
            out["x-amz-checksum-type"] = "COMPOSITE" if "-" in whole else "FULL_OBJECT"
    return out


async def delete_object(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeleteObject (204 whether or not the key existed)."""
    vid = _version_query(req)
    result = await gw.delete_version_or_key(bucket, req.key, vid, may_bypass_governance(req, bucket, req.key, vid))
    headers = {}
    if result.get("DeleteMarker"):
        headers["x-amz-delete-marker"] = "true"
    vid = result.get("DeleteMarkerVersionId") or result.get("VersionId")
    if vid:
        headers["x-amz-version-id"] = vid
    return Response(204, headers)


async def delete_objects(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeleteObjects (multi-object delete, up to 1000 keys)."""
    body = req.body()
    raw = await body.read_all(2 * 1024 * 1024)
    check_required_digest(req.headers, body.trailers, raw)
    root = parse_xml(raw)
    if root.tag != "Delete":
        raise S3Error("MalformedXML")
    quiet = (child_text(root, "Quiet", "false") or "").strip().lower()
    if quiet not in ("true", "false"):
        raise S3Error("MalformedXML", "Quiet must be true or false")
    quiet = quiet == "true"
    objects = root.findall("Object")
    if not objects or len(objects) > 1000:
        raise S3Error("MalformedXML", "A Delete request names between 1 and 1000 objects")
    wanted, refused = [], {}
    for obj in objects:
        key = child_text(obj, "Key")
        vid = child_text(obj, "VersionId")
        if not key:
            raise S3Error("MalformedXML", "Every Object needs a Key")
        wanted.append((key, vid))
        try:  # each key as its own DeleteObject (a policy may allow or deny some keys only)
            check_access(req, bucket, "s3:DeleteObjectVersion" if vid else "s3:DeleteObject", key, vid)
        except S3Error as err:
            refused[(key, vid)] = err
    if len(refused) == len(wanted):  # no right to delete any of them: the request is refused
        raise next(iter(refused.values()))
    out = []
    for key, vid in wanted:
        try:
            if (key, vid) in refused:
                raise refused[(key, vid)]
            result = await gw.delete_version_or_key(bucket, key, vid, may_bypass_governance(req, bucket, key, vid))
        except S3Error as err:
            version = el("VersionId", vid) if vid else ""
            out.append(f"<Error>{el('Key', key)}{version}{el('Code', err.code)}{el('Message', err.message)}</Error>")
            continue
        if quiet:
            continue
        fields = "".join(el(k, v) for k, v in result.items())
        out.append(f"<Deleted>{el('Key', key)}{fields}</Deleted>")
    return xml_response(xml_doc("DeleteResult", "".join(out)))


def parse_copy_source(value: str) -> tuple[str, str, str | None]:
    """(bucket, key, version id) from an x-amz-copy-source header."""
    path, _, query = value.partition("?")
    path = unquote(path).lstrip("/")
    bucket, _, key = path.partition("/")
    if not bucket or not key:
        raise S3Error("InvalidArgument", "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
                      ArgumentName="x-amz-copy-source")
    vid = dict(parse_qsl(query)).get("versionId") if query else None
    return bucket, key, vid


async def copy_source(gw: Gateway, req: Request) -> Record:
    """The source version of a copy, after the signer's access and copy-source conditions."""
    sb, sk, svid = parse_copy_source(req.headers["x-amz-copy-source"])
    src_bucket = gw.buckets.get(sb)
    check_access(req, src_bucket, "s3:GetObjectVersion" if svid else "s3:GetObject", sk, svid)
    rec = await lookup(gw, src_bucket, sk, svid)
    check_foreign_object(req, src_bucket, rec.meta, "s3:GetObjectVersion" if svid else "s3:GetObject", sk)
    check_conditions(req.headers, rec, prefix="x-amz-copy-source-", copy=True)
    check_readable(rec)
    return rec


async def copy_object(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """CopyObject with the COPY/REPLACE metadata and tagging directives."""
    check_write_class(req.headers)
    src = await copy_source(gw, req)
    src_key = sse.check_read(gw.keyring, src.meta, req.headers, sse.COPY_CUSTOMER)
    directive = req.headers.get("x-amz-metadata-directive", "COPY").upper()
    tag_directive = req.headers.get("x-amz-tagging-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE") or tag_directive not in ("COPY", "REPLACE"):
        raise S3Error("InvalidArgument", "Unknown metadata or tagging directive")
    sb, sk, _ = parse_copy_source(req.headers["x-amz-copy-source"])
    if (sb == bucket.name and sk == req.key and directive == "COPY" and "x-amz-storage-class" not in req.headers
            and not sse.requested(req.headers)):
        raise S3Error("InvalidRequest", "This copy request is illegal because it is trying to copy an object to "
                      "itself without changing the object's metadata, storage class, website redirect location "
                      "or encryption attributes.")
    meta = objectlock.strip(src.meta) if directive == "COPY" else meta_from_headers(req.headers)
    meta.pop("sse", None)
    meta.pop("pck", None)
    meta.update(objectlock.for_new_version(bucket, req.headers))
    meta.pop("tags", None)
    meta.pop("sc", None)  # a copy is written to STANDARD
    if tag_directive == "COPY" and src.meta.get("tags"):
        meta["tags"] = src.meta["tags"]
    elif tag_directive == "REPLACE" and "x-amz-tagging" in req.headers:
        meta["tags"] = parse_tag_header(req.headers["x-amz-tagging"])
    new_object_acl(gw, req, bucket, meta)  # a copy gets its own owner and ACL, never the source's
    bucket.check_quota(src.size)
    wk = sse.for_write(gw.keyring, req.headers, bucket)
    cipher = wk.cipher() if wk else None
    stored = await gw.copy_data(bucket, src, cipher=cipher, src_key=src_key)
    # a multipart source's composite checksum does not describe the single-part copy
    meta["ck"] = src.meta.get("ck", {}) if part_sizes(src.loc) is None else {}
    etag = src.etag
    if src_key or (wk and wk.mode == "SSE-C"):  # an SSE-C ETag is no MD5 of the plaintext
        etag = sse.etag_for(wk, stored.md5_hex)
    if wk:
        meta["sse"] = wk.meta(cipher.np)
    rec = gw.make_record(bucket, req.key, stored, etag, meta)
    await gw.commit(bucket, Op("put", rec, versioned=bucket.versioning == "Enabled"), stored.in_segment)
    headers = wk.headers() if wk else {}
    if bucket.versioning == "Enabled":  # not the null version a suspended bucket writes
        headers["x-amz-version-id"] = rec.version_id
    if src.version_id != "null":
        headers["x-amz-copy-source-version-id"] = src.version_id
    add_expiration(gw, bucket, rec, headers)
    return xml_response(xml_doc("CopyObjectResult", el("LastModified", iso_time(rec.mtime))
                                + el("ETag", f'"{etag}"')), headers=headers)


async def put_tagging(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutObjectTagging (replaces the version's tag set)."""
    root = parse_xml(await req.body().read_all(64 * 1024))
    tags = {}
    for tag in root.iter("Tag"):
        k, v = child_text(tag, "Key"), child_text(tag, "Value", "")
        if k is None:
            raise S3Error("MalformedXML", "Every Tag needs a Key")
        if k in tags:
            raise S3Error("InvalidTag", "Cannot provide multiple Tags with the same key")
        tags[k] = v
    _check_tags(tags)
    return await _set_tags(gw, req, bucket, tags)


async def _set_tags(gw: Gateway, req: Request, bucket: Bucket, tags: dict) -> Response:
    rec = await lookup(gw, bucket, req.key, _version_query(req))
    meta = dict(rec.meta)
    meta["tags"] = tags
    await gw.commit(bucket, Op("set_meta", key=rec.key, version_id=rec.version_id, meta=meta))
    status = 204 if req.method == "DELETE" else 200
    return Response(status, {"x-amz-version-id": rec.version_id} if bucket.versioning else {})


async def get_tagging(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetObjectTagging."""
    rec = await lookup(gw, bucket, req.key, _version_query(req))
    tags = "".join(f"<Tag>{el('Key', k)}{el('Value', v)}</Tag>" for k, v in rec.meta.get("tags", {}).items())
    headers = {"x-amz-version-id": rec.version_id} if bucket.versioning else {}
    return xml_response(xml_doc("Tagging", f"<TagSet>{tags}</TagSet>"), headers=headers)


async def delete_tagging(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeleteObjectTagging."""
    return await _set_tags(gw, req, bucket, {})


ATTRIBUTES = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")


async def get_attributes(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetObjectAttributes: the ``x-amz-object-attributes`` asked for, without the body (no
    restore needed, whatever the storage class); ObjectParts pages the parts (numbers, sizes,
    checksums) with ``x-amz-max-parts`` and ``x-amz-part-number-marker``."""
    wanted = [a.strip() for a in req.headers.get("x-amz-object-attributes", "").split(",") if a.strip()]
    unknown = [a for a in wanted if a not in ATTRIBUTES]
    if not wanted or unknown:
        raise S3Error("InvalidArgument", f"x-amz-object-attributes must name some of {', '.join(ATTRIBUTES)}",
                      ArgumentName="x-amz-object-attributes", ArgumentValue=",".join(unknown))
    max_parts, marker = _int_header(req, "x-amz-max-parts", 1000), _int_header(req, "x-amz-part-number-marker", 0)
    rec = await lookup(gw, bucket, req.key, _version_query(req))
    check_foreign_object(req, bucket, rec.meta, "s3:GetObject", req.key)
    sse.check_read(gw.keyring, rec.meta, req.headers)
    check_conditions(req.headers, rec)
    body = []
    if "ETag" in wanted:
        body.append(el("ETag", rec.etag))
    checks = rec.meta.get("ck", {})
    if "Checksum" in wanted and checks:
        kind = "COMPOSITE" if any("-" in v for v in checks.values()) else "FULL_OBJECT"
        body.append("<Checksum>" + "".join(el(f"Checksum{a.upper()}", v) for a, v in checks.items())
                    + el("ChecksumType", kind) + "</Checksum>")
    sizes = part_sizes(rec.loc)
    if "ObjectParts" in wanted and sizes is not None:
        part_checks = rec.meta.get("pck") or [{}] * len(sizes)
        numbers = list(range(marker + 1, len(sizes) + 1))
        page, truncated = numbers[:max_parts], len(numbers) > max_parts
        parts = "".join(f"<Part>{el('PartNumber', n)}{el('Size', sizes[n - 1])}"
                        + "".join(el(f"Checksum{a.upper()}", v) for a, v in part_checks[n - 1].items())
                        + "</Part>" for n in page)
        body.append(f"<ObjectParts>{el('PartsCount', len(sizes))}{el('PartNumberMarker', marker)}"
                    + (el("NextPartNumberMarker", page[-1]) if page else "")
                    + f"{el('MaxParts', max_parts)}{el('IsTruncated', truncated)}{parts}</ObjectParts>")
    if "StorageClass" in wanted:
        body.append(el("StorageClass", storage_class(rec)))
    if "ObjectSize" in wanted:
        body.append(el("ObjectSize", rec.size))
    headers = {"last-modified": http_date(rec.mtime)}
    if bucket.versioning or rec.version_id != "null":
        headers["x-amz-version-id"] = rec.version_id
    return xml_response(xml_doc("GetObjectAttributesResponse", "".join(body)), headers=headers)


def _int_header(req: Request, name: str, default: int) -> int:
    raw = req.headers.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0 or (name == "x-amz-max-parts" and value > 1000):
        raise S3Error("InvalidArgument", f"{name} must be an integer between 0 and "
                      f"{1000 if name == 'x-amz-max-parts' else 10000}", ArgumentName=name, ArgumentValue=raw)
    return value


async def restore_object(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """RestoreObject (POST ?restore, RestoreRequest Days): 202 started, 200 already restored
    (expiry extended); hot and instant-class objects answer InvalidObjectState (see :mod:`.tiers`)."""
    rec = await lookup(gw, bucket, req.key, _version_query(req))
    body = await req.body().read_all(64 * 1024)
    days = parse_restore_days(parse_xml(body)) if body.strip() else 1
    status = await gw.cold.restore(bucket, rec, days)
    return Response(status, {"x-amz-version-id": rec.version_id} if bucket.versioning else {})
