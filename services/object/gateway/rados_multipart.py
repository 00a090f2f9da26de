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

The handlers' flow, validation and answers are :mod:`.multipart`'s (its shared helpers); only
where the state lives differs.
"""
from __future__ import annotations

import errno
import json
import time

import rados

from . import multipart as mp
from .errors import S3Error
from .index import Op
from .lifecycle import add_expiration
from .object_ops import raise_precondition, write_conditions
from .rados_buckets import upload_oid, uploads_oid
from .rados_data import omap_vals as _vals, remove
from .request import Request, Response

SEP = "\x01"


def _oid(bucket, upload_id: str) -> str:
    if not upload_id or not all(c in "0123456789abcdef" for c in upload_id):
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    return upload_oid(bucket.index.bid, upload_id)


def _list_oid(bucket) -> str:
    return uploads_oid(bucket.index.bid)


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


async def _open(gw, req: Request, bucket) -> tuple[str, str, dict]:
    """(upload id, object, info) of the request's upload, NoSuchUpload unless it is open."""
    upload_id = req.query["uploadId"]
    oid, info, state = await gw.run(_load, gw, bucket, upload_id, req.key)
    if state != "open":
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    return upload_id, oid, info


def _parts(gw, oid: str) -> dict[int, dict]:
    return {int(k[5:]): json.loads(v) for k, v in _vals(gw.ioctx, oid, prefix="part/").items()}


async def create(gw, req: Request, bucket) -> Response:
    """CreateMultipartUpload."""
    upload_id, info, headers = mp.new_upload(gw, req, bucket)
    oid = _oid(bucket, upload_id)

    def make():
        gw.ioctx.write_full(oid, b"")
        _write(gw.ioctx, oid, {"info": json.dumps(info), "state": "open"})
        _write(gw.ioctx, _list_oid(bucket), {f"o/{req.key}{SEP}{upload_id}": json.dumps(info)})

    await gw.run(make)
    return mp.created(bucket, req, upload_id, headers)


async def _record_part(gw, bucket, oid: str, upload_id: str, number: int, stored, cipher) -> dict:
    part = mp.new_part(stored, cipher, loc=stored.loc)

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
    upload_id, oid, info = await _open(gw, req, bucket)
    stored, cipher, wk = await mp.store_part(gw, req, bucket, info)
    await _record_part(gw, bucket, oid, upload_id, number, stored, cipher)
    return mp.part_stored(stored, wk)


async def upload_part_copy(gw, req: Request, bucket) -> Response:
    """UploadPartCopy, with an optional x-amz-copy-source-range."""
    number = mp._part_number(req)
    upload_id, oid, info = await _open(gw, req, bucket)
    stored, cipher, wk = await mp.copy_part(gw, req, bucket, info)
    part = await _record_part(gw, bucket, oid, upload_id, number, stored, cipher)
    return mp.part_copied(stored, part, wk)


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
        chosen, checksums, ck_type, total, etag = mp.choose_parts(req, bucket, upload_id, info, parts, wanted, raw)
        loc = {"r": [piece for p in chosen for piece in p["loc"]["r"]], "mpu": upload_id,
               "psizes": [p["size"] for p in chosen]}   # (GET ?partNumber=N, see .tiers.part_sizes)
        stored = mp.Stored(loc, total, etag, {}, True)
        rec = gw.make_record(bucket, req.key, stored, etag, mp.completed_meta(info, chosen, checksums))
        result = await gw.commit(bucket, Op("put", rec, versioned=bucket.versioning == "Enabled", **conditions))
        if result.precondition:
            raise_precondition(result.precondition, conditions)
    except BaseException:
        await gw.run(_write, gw.ioctx, oid, {"state": "open"}, (), "completing")
        raise
    done = mp.done_record(req, wanted, etag, rec.version_id, checksums, ck_type, info)
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
    if state != "open" or not await gw.run(_drop, gw, bucket, req.key, upload_id):
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    return Response(204)


def _drop(gw, bucket, key: str, upload_id: str) -> bool:
    """Take an open upload (False if it is not open any more), remove its parts and itself."""
    oid = _oid(bucket, upload_id)
    if not _write(gw.ioctx, oid, {"state": "aborted"}, (), "open"):
        return False
    for p in _parts(gw, oid).values():
        remove(gw.ioctx, p["loc"])
    _write(gw.ioctx, _list_oid(bucket), drops=(f"o/{key}{SEP}{upload_id}",))
    gw.ioctx.remove_object(oid)
    return True


def abort_stale(gw, bucket, prefix: str, older_than: float) -> int:
    """The lifecycle's AbortIncompleteMultipartUpload (blocking): drop the open uploads of
    keys under ``prefix`` initiated before ``older_than``; how many this call dropped (an
    upload that another gateway completes or aborts meanwhile is left to it)."""
    stale = [(key, upload_id) for key, upload_id, info in _open_uploads(gw, bucket, prefix)
             if info["initiated"] < older_than]
    return sum(_drop(gw, bucket, key, upload_id) for key, upload_id in stale)


def _open_uploads(gw, bucket, prefix: str) -> list[tuple[str, str, dict]]:
    """(key, upload id, info) of the open uploads of keys under ``prefix``, in that order
    (the key is the info's, and checked again: keys may hold the separator, so ``o/<prefix>``
    also finds uploads of shorter keys)."""
    found = _vals(gw.ioctx, _list_oid(bucket), None, "o/" + prefix)
    return sorted((info["key"], k.rpartition(SEP)[2], info) for k, info in
                  ((k, json.loads(v)) for k, v in found.items()) if info["key"].startswith(prefix))


async def list_parts(gw, req: Request, bucket) -> Response:
    """ListParts with part-number-marker and max-parts."""
    upload_id, oid, info = await _open(gw, req, bucket)
    return mp.parts_listed(req, bucket, upload_id, info, await gw.run(_parts, gw, oid))


async def list_uploads(gw, req: Request, bucket) -> Response:
    """ListMultipartUploads (prefix, key-marker, upload-id-marker, max-uploads)."""
    prefix, key_marker, id_marker, limit = mp.uploads_query(req)
    uploads = await gw.run(_open_uploads, gw, bucket, prefix)
    return mp.uploads_listed(bucket, prefix, key_marker, id_marker, limit, uploads)


HANDLERS = {"CreateMultipartUpload": create, "UploadPart": upload_part, "UploadPartCopy": upload_part_copy,
            "CompleteMultipartUpload": complete, "AbortMultipartUpload": abort, "ListParts": list_parts,
            "ListMultipartUploads": list_uploads}
