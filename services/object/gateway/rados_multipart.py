"""Multipart uploads on the RADOS store: any part on any gateway, completed on any.

An upload is the object ``<bucket-id>.upload.<id>`` with omap ``info`` (key, metadata, owner,
checksum algorithm), ``state`` (``open``, ``completing``, ``completed``) and one ``part/NNNNN``
per part (etag, size, checksums, its data objects, written before the entry). Every part entry
is set with ``omap_cmp(state, "open")``, so no part lands once Complete has taken the upload
(``open`` -> ``completing`` in one op); Complete then reads the parts, commits the object's
index entry (naming the parts' data objects end to end: no byte copied) and marks the upload
``completed`` with its result, which answers a repeated Complete. ``<bucket-id>.uploads`` lists
the open uploads (omap ``o/<key>\\x01<id>``) for ListMultipartUploads, and the completed ones
(``c/<id>``, whose objects answer a repeated Complete) until the bucket is deleted.

The validation and answers are :mod:`.multipart`'s (its helpers are shared); only where the
state lives differs.
"""
from __future__ import annotations

import errno
import hashlib
import json
import time
import uuid

import rados

from . import multipart as mp
from . import objectlock, sse
from .access import new_object_acl
from .bucket_ops import iso_time, owner_xml
from .errors import S3Error, el, xml_doc
from .index import Op
from .lifecycle import add_expiration
from .object_ops import copy_source, meta_from_headers, raise_precondition, write_conditions
from .rados_buckets import upload_oid, uploads_oid
from .rados_data import remove
from .rados_store import not_implemented
from .request import Request, Response, xml_response
from .tiers import check_write_class

SEP = "\x01"


def _oid(bucket, upload_id: str) -> str:
    if not upload_id or not all(c in "0123456789abcdef" for c in upload_id):
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    return upload_oid(bucket.index.bid, upload_id)


def _list_oid(bucket) -> str:
    return uploads_oid(bucket.index.bid)


def _vals(io, oid: str, keys=None, prefix: str = "", after: str = "") -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    while True:
        with rados.ReadOpCtx() as op:
            if keys is not None:
                it, _ = io.get_omap_vals_by_keys(op, tuple(keys))
            else:
                it, _ = io.get_omap_vals(op, after, prefix, 1000)
            try:
                io.operate_read_op(op, oid)
            except rados.ObjectNotFound:
                return out
            page = list(it)
        out.update(page)
        if keys is not None or len(page) < 1000:
            return out
        after = page[-1][0]


def _write(io, oid: str, sets: dict | None = None, drops=(), expect_state: str | None = None) -> bool:
    """One op on ``oid``; False if its ``state`` was not ``expect_state`` (or it is gone)."""
    with rados.WriteOpCtx() as op:
        if expect_state is not None:
            op.omap_cmp("state", expect_state, rados.LIBRADOS_CMPXATTR_OP_EQ)
        if drops:
            io.remove_omap_keys(op, tuple(drops))
        if sets:
            io.set_omap(op, tuple(sets), tuple(v if isinstance(v, bytes) else v.encode() for v in sets.values()))
        try:
            io.operate_write_op(op, oid)
            return True
        except (rados.ObjectNotFound, rados.Error) as exc:
            if isinstance(exc, rados.ObjectNotFound) or getattr(exc, "errno", None) in (errno.ECANCELED,
                                                                                         errno.ENOENT):
                return False
            raise


def _load(gw, bucket, upload_id: str, key: str) -> tuple[str, dict, str]:
    """(object, info, state) of an upload of ``key`` (NoSuchUpload if there is none)."""
    oid = _oid(bucket, upload_id)
    vals = _vals(gw.ioctx, oid, ["info", "state", "done"])
    if "info" not in vals:
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    info = json.loads(vals["info"])
    if info["key"] != key:
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    info["done"] = json.loads(vals["done"]) if "done" in vals else None
    return oid, info, vals.get("state", b"").decode()


def _parts(gw, oid: str) -> dict[int, dict]:
    return {int(k[5:]): json.loads(v) for k, v in _vals(gw.ioctx, oid, prefix="part/").items()}


async def create(gw, req: Request, bucket) -> Response:
    """CreateMultipartUpload."""
    check_write_class(req.headers)
    algo = (req.headers.get("x-amz-checksum-algorithm") or "").lower()
    if algo and algo not in mp.ALGORITHMS:
        raise S3Error("InvalidRequest", f"Unsupported checksum algorithm {algo!r}; use one of {mp.ALGORITHMS}")
    ck_type = mp._checksum_type(req.headers, algo)
    if sse.for_write(gw.keyring, req.headers, bucket):
        raise not_implemented("server-side encryption")
    upload_id = uuid.uuid4().hex
    meta = new_object_acl(gw, req, bucket, meta_from_headers(req.headers))
    meta.update(objectlock.for_new_version(bucket, req.headers))
    info = {"key": req.key, "meta": meta, "initiated": time.time(), "owner": req.auth.user,
            "ck_algo": algo, "ck_type": ck_type}
    oid = _oid(bucket, upload_id)

    def make():
        gw.ioctx.write_full(oid, b"")
        _write(gw.ioctx, oid, {"info": json.dumps(info), "state": "open"})
        _write(gw.ioctx, _list_oid(bucket), {f"o/{req.key}{SEP}{upload_id}": json.dumps(info)})

    await gw.run(make)
    headers = {"x-amz-checksum-algorithm": algo.upper(), "x-amz-checksum-type": ck_type} if algo else {}
    return xml_response(xml_doc("InitiateMultipartUploadResult", el("Bucket", bucket.name) + el("Key", req.key)
                                + el("UploadId", upload_id)), headers=headers)


async def _record_part(gw, bucket, oid: str, upload_id: str, number: int, stored) -> dict:
    part = {"etag": stored.md5_hex, "size": stored.size, "loc": stored.loc, "mtime": time.time(),
            "ck": stored.checksums}

    def record():
        old = _vals(gw.ioctx, oid, [f"part/{number:05d}"]).get(f"part/{number:05d}")
        if not _write(gw.ioctx, oid, {f"part/{number:05d}": json.dumps(part)}, expect_state="open"):
            remove(gw.ioctx, stored.loc)
            raise S3Error("NoSuchUpload", UploadId=upload_id)
        if old:  # a resent part replaced it
            remove(gw.ioctx, json.loads(old)["loc"])

    await gw.run(record)
    return part


async def upload_part(gw, req: Request, bucket) -> Response:
    """UploadPart: the part's data objects, then its entry (only while the upload is open)."""
    number = mp._part_number(req)
    upload_id = req.query["uploadId"]
    oid, info, state = await gw.run(_load, gw, bucket, upload_id, req.key)
    if state != "open":
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    body = req.body()
    if body.size is None:
        raise S3Error("MissingContentLength")
    stored = await gw.store_body(bucket, body, req.headers, force_file=True)
    await _record_part(gw, bucket, oid, upload_id, number, stored)
    headers = {"etag": f'"{stored.md5_hex}"'}
    for algo, value in stored.checksums.items():
        headers[f"x-amz-checksum-{algo}"] = value
    return Response(200, headers)


async def upload_part_copy(gw, req: Request, bucket) -> Response:
    """UploadPartCopy, with an optional x-amz-copy-source-range."""
    number = mp._part_number(req)
    upload_id = req.query["uploadId"]
    oid, info, state = await gw.run(_load, gw, bucket, upload_id, req.key)
    if state != "open":
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    src = await copy_source(gw, req)
    start, end = 0, src.size
    if req.headers.get("x-amz-copy-source-range") is not None:
        start, end = mp._copy_range(req.headers["x-amz-copy-source-range"], src.size)
    algorithms = {info["ck_algo"]} if info.get("ck_algo") else set()
    stored = await gw.copy_data(bucket, src, start, end, algorithms=algorithms)
    part = await _record_part(gw, bucket, oid, upload_id, number, stored)
    checks = "".join(el(f"Checksum{a.upper()}", v) for a, v in stored.checksums.items())
    return xml_response(xml_doc("CopyPartResult", el("LastModified", iso_time(part["mtime"]))
                                + el("ETag", f'"{stored.md5_hex}"') + checks))


async def complete(gw, req: Request, bucket) -> Response:
    """CompleteMultipartUpload: take the upload (open -> completing), validate the part list,
    commit the object (with If-None-Match / If-Match), mark the upload completed."""
    upload_id = req.query["uploadId"]
    raw = await req.body().read_all(4 * 1024 * 1024)
    wanted = mp._parse_complete(raw)
    oid, info, state = await gw.run(_load, gw, bucket, upload_id, req.key)
    done = info.pop("done")
    if state == "completed" and done and done["parts"] == [list(p) for p in wanted]:
        return mp._complete_result(gw, bucket, req, done)
    if state != "open":
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    conditions = write_conditions(bucket, req.key, req.headers)
    if not await gw.run(_write, gw.ioctx, oid, {"state": "completing"}, (), "open"):
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    try:
        parts = await gw.run(_parts, gw, oid)
        numbers = [n for n, _ in wanted]
        if any(b <= a for a, b in zip(numbers, numbers[1:])):
            raise S3Error("InvalidPartOrder", UploadId=upload_id)
        chosen = []
        for n, etag in wanted:
            part = parts.get(n)
            if part is None or part["etag"] != etag:
                raise S3Error("InvalidPart", UploadId=upload_id, PartNumber=str(n), ETag=etag)
            chosen.append(part)
        for i, ((n, _), part) in enumerate(zip(wanted, chosen)):
            if i < len(wanted) - 1 and part["size"] < mp.MIN_PART_SIZE:
                raise S3Error("EntityTooSmall", UploadId=upload_id, PartNumber=str(n),
                              ProposedSize=str(part["size"]), MinSizeAllowed=str(mp.MIN_PART_SIZE))
        checksums = mp._composite_checksums(wanted, chosen, mp._part_checksum_claims(raw), upload_id)
        ck_type = info.get("ck_type") or "COMPOSITE"
        if ck_type == "FULL_OBJECT":
            checksums = mp._full_object_checksums(info["ck_algo"], chosen, req.headers)
        else:
            checksums.pop("crc64nvme", None)
        mp.check_claimed_checksums(req.headers, checksums, info.get("ck_algo") or "")
        total = sum(p["size"] for p in chosen)
        bucket.check_quota(total)
        etag = hashlib.md5(b"".join(bytes.fromhex(p["etag"]) for p in chosen)).hexdigest() + f"-{len(chosen)}"
        loc = {"r": [piece for p in chosen for piece in p["loc"]["r"]], "mpu": upload_id,
               "psizes": [p["size"] for p in chosen]}   # (GET ?partNumber=N, see .tiers.part_sizes)
        meta = dict(info["meta"])
        meta["ck"] = checksums
        if any(p.get("ck") for p in chosen):
            meta["pck"] = [p.get("ck", {}) for p in chosen]
        stored = mp.Stored(loc, total, etag, {}, True)
        rec = gw.make_record(bucket, req.key, stored, etag, meta)
        result = await gw.commit(bucket, Op("put", rec, versioned=bucket.versioning == "Enabled", **conditions))
        if result.precondition:
            raise_precondition(result.precondition, conditions)
    except BaseException:
        await gw.run(_write, gw.ioctx, oid, {"state": "open"}, (), "completing")
        raise
    done = {"key": req.key, "parts": [list(p) for p in wanted], "etag": etag, "version_id": rec.version_id,
            "checksums": checksums, "ck_type": ck_type, "sse": None}
    used = {tuple(piece) for piece in loc["r"]}

    def finish():
        _write(gw.ioctx, oid, {"state": "completed", "done": json.dumps(done)})
        _write(gw.ioctx, _list_oid(bucket), {f"c/{upload_id}": json.dumps(time.time())},
               drops=(f"o/{req.key}{SEP}{upload_id}",))   # kept for a repeated Complete, removed with the bucket
        for p in parts.values():   # parts uploaded but not named
            remove(gw.ioctx, {"r": [piece for piece in p["loc"]["r"] if tuple(piece) not in used]})

    await gw.run(finish)
    resp = mp._complete_result(gw, bucket, req, done)
    add_expiration(gw, bucket, rec, resp.headers)
    return resp


async def abort(gw, req: Request, bucket) -> Response:
    """AbortMultipartUpload: the parts' data objects and the upload go."""
    upload_id = req.query["uploadId"]
    oid, _, state = await gw.run(_load, gw, bucket, upload_id, req.key)

    def drop():
        if state != "open" or not _write(gw.ioctx, oid, {"state": "aborted"}, (), "open"):
            raise S3Error("NoSuchUpload", UploadId=upload_id)
        for p in _parts(gw, oid).values():
            remove(gw.ioctx, p["loc"])
        _write(gw.ioctx, _list_oid(bucket), drops=(f"o/{req.key}{SEP}{upload_id}",))
        gw.ioctx.remove_object(oid)

    await gw.run(drop)
    return Response(204)


async def list_parts(gw, req: Request, bucket) -> Response:
    """ListParts with part-number-marker and max-parts."""
    upload_id = req.query["uploadId"]
    oid, info, state = await gw.run(_load, gw, bucket, upload_id, req.key)
    if state != "open":
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    parts = await gw.run(_parts, gw, oid)
    try:
        marker = int(req.query.get("part-number-marker", "0") or 0)
        max_parts = min(int(req.query.get("max-parts", "1000")), 1000)
    except ValueError:
        raise S3Error("InvalidArgument", "part-number-marker and max-parts must be integers") from None
    numbers = sorted(n for n in parts if n > marker)
    page, truncated = numbers[:max_parts], len(numbers) > max_parts
    body = [el("Bucket", bucket.name), el("Key", req.key), el("UploadId", upload_id),
            owner_xml(info["owner"]).replace("Owner>", "Initiator>"), owner_xml(bucket.owner),
            el("StorageClass", "STANDARD"), el("PartNumberMarker", marker),
            el("NextPartNumberMarker", page[-1] if page else marker), el("MaxParts", max_parts),
            el("IsTruncated", truncated)]
    for n in page:
        p = parts[n]
        ck = "".join(el(f"Checksum{a.upper()}", v) for a, v in p.get("ck", {}).items())
        body.append(f"<Part>{el('PartNumber', n)}{el('LastModified', iso_time(p['mtime']))}"
                    f"{el('ETag', chr(34) + p['etag'] + chr(34))}{el('Size', p['size'])}{ck}</Part>")
    return xml_response(xml_doc("ListPartsResult", "".join(body)))


async def list_uploads(gw, req: Request, bucket) -> Response:
    """ListMultipartUploads (prefix, key-marker, upload-id-marker, max-uploads)."""
    q = req.query
    prefix = q.get("prefix", "")
    key_marker, id_marker = q.get("key-marker", ""), q.get("upload-id-marker", "")
    try:
        limit = min(int(q.get("max-uploads", "1000")), 1000)
    except ValueError:
        raise S3Error("InvalidArgument", "max-uploads must be an integer") from None
    found = await gw.run(_vals, gw.ioctx, _list_oid(bucket), None, "o/" + prefix)
    uploads = sorted((k[2:].partition(SEP)[0], k.partition(SEP)[2], json.loads(v)) for k, v in found.items())
    uploads = [u for u in uploads if (u[0], u[1]) > (key_marker, id_marker)]
    page, truncated = uploads[:limit], len(uploads) > limit
    body = [el("Bucket", bucket.name), el("KeyMarker", key_marker), el("UploadIdMarker", id_marker),
            el("Prefix", prefix), el("MaxUploads", limit), el("IsTruncated", truncated)]
    if truncated and page:
        body += [el("NextKeyMarker", page[-1][0]), el("NextUploadIdMarker", page[-1][1])]
    for key, upload_id, info in page:
        body.append(f"<Upload>{el('Key', key)}{el('UploadId', upload_id)}"
                    f"{owner_xml(info['owner']).replace('Owner>', 'Initiator>')}{owner_xml(info['owner'])}"
                    f"{el('StorageClass', 'STANDARD')}{el('Initiated', iso_time(info['initiated']))}</Upload>")
    return xml_response(xml_doc("ListMultipartUploadsResult", "".join(body)))


HANDLERS = {"CreateMultipartUpload": create, "UploadPart": upload_part, "UploadPartCopy": upload_part_copy,
            "CompleteMultipartUpload": complete, "AbortMultipartUpload": abort, "ListParts": list_parts,
            "ListMultipartUploads": list_uploads}
