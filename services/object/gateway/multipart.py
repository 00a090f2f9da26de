"""Multipart uploads: create, upload part (and part copy), complete, abort, list parts/uploads.

An upload is a directory ``buckets/<b>/uploads/<id>/`` holding ``upload.json`` and, per part,
a data file plus ``NNNNN.json`` (etag, size, file), each written durably before the part is
acknowledged. Complete renames the directory into ``data/`` and commits one index entry that
lists the part files: no byte is copied, and until that commit the object does not exist.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid

from plumbing.atomic import fsync_dir, write_json_atomic

from . import objectlock, sse
from .access import new_object_acl
from .bucket_ops import iso_time, owner_xml
from .buckets import Bucket
from .core import Gateway, Stored
from .errors import S3Error, child_text, el, parse_xml, xml_doc
from .index import Op
from .lifecycle import add_expiration
from .checksums import ALGORITHMS, CRCS, composite, full_object, is_checksum_value
from .object_ops import copy_source, meta_from_headers, raise_precondition, write_conditions
from .tiers import check_write_class
from .request import Request, Response, xml_response

MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PARTS = 10000


def _upload_dir(bucket: Bucket, upload_id: str) -> str:
    if not upload_id or not all(c in "0123456789abcdef" for c in upload_id):
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    return os.path.join(bucket.uploads_dir, upload_id)


def _load_upload(bucket: Bucket, upload_id: str, key: str | None = None) -> tuple[str, dict]:
    path = _upload_dir(bucket, upload_id)
    try:
        with open(os.path.join(path, "upload.json")) as fh:
            info = json.load(fh)
    except FileNotFoundError:
        raise S3Error("NoSuchUpload", UploadId=upload_id) from None
    if key is not None and info["key"] != key:
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    return path, info


def _parts(path: str) -> dict[int, dict]:
    parts = {}
    for name in os.listdir(path):
        if name.endswith(".json") and name[:5].isdigit():
            with open(os.path.join(path, name)) as fh:
                parts[int(name[:5])] = json.load(fh)
    return parts


# -- the handlers' flow, shared with the RADOS store (:mod:`.rados_multipart`): what differs
# between the stores is only where an upload, its parts and its completion are kept

def new_upload(gw: Gateway, req: Request, bucket: Bucket) -> tuple[str, dict, dict]:
    """CreateMultipartUpload's checks: (upload id, the upload's info, the answer's headers)."""
    check_write_class(req.headers)
    algo = (req.headers.get("x-amz-checksum-algorithm") or "").lower()
    if algo and algo not in ALGORITHMS:
        raise S3Error("InvalidRequest", f"Unsupported checksum algorithm {algo!r}; use one of {ALGORITHMS}")
    ck_type = _checksum_type(req.headers, algo)
    wk = sse.for_write(gw.keyring, req.headers, bucket)
    upload_id = uuid.uuid4().hex
    meta = new_object_acl(gw, req, bucket, meta_from_headers(req.headers))
    meta.update(objectlock.for_new_version(bucket, req.headers))
    info = {"key": req.key, "meta": meta, "initiated": time.time(),
            "owner": req.auth.user, "ck_algo": algo, "ck_type": ck_type}
    if wk:
        info["sse"] = wk.upload_info()
    headers = {"x-amz-checksum-algorithm": algo.upper(), "x-amz-checksum-type": ck_type} if algo else {}
    headers.update(wk.headers() if wk else {})
    return upload_id, info, headers


def created(bucket: Bucket, req: Request, upload_id: str, headers: dict) -> Response:
    return xml_response(xml_doc("InitiateMultipartUploadResult", el("Bucket", bucket.name) + el("Key", req.key)
                                + el("UploadId", upload_id)), headers=headers)


async def store_part(gw: Gateway, req: Request, bucket: Bucket, info: dict, **where):
    """UploadPart's body into the store (``where``: the store's own arguments): (stored, cipher, key)."""
    body = req.body()
    if body.size is None:
        raise S3Error("MissingContentLength")
    wk = sse.for_upload(gw.keyring, info.get("sse"), req.headers)
    cipher = wk.cipher() if wk else None
    stored = await gw.store_body(bucket, body, req.headers, force_file=True, cipher=cipher, **where)
    return stored, cipher, wk


async def copy_part(gw: Gateway, req: Request, bucket: Bucket, info: dict, **where):
    """UploadPartCopy's bytes (an optional x-amz-copy-source-range) into the store: (stored, cipher, key)."""
    src = await copy_source(gw, req)
    src_key = sse.check_read(gw.keyring, src.meta, req.headers, sse.COPY_CUSTOMER)
    wk = sse.for_upload(gw.keyring, info.get("sse"), req.headers)
    cipher = wk.cipher() if wk else None
    start, end = 0, src.size
    rng = req.headers.get("x-amz-copy-source-range")
    if rng is not None:
        start, end = _copy_range(rng, src.size)
    algorithms = {info["ck_algo"]} if info.get("ck_algo") else set()
    stored = await gw.copy_data(bucket, src, start, end, cipher=cipher, src_key=src_key, algorithms=algorithms,
                                **where)
    return stored, cipher, wk


def new_part(stored: Stored, cipher, **where) -> dict:
    """A part's record (``where``: where the store keeps its bytes)."""
    return {"etag": stored.md5_hex, "size": stored.size, **where, "mtime": time.time(), "ck": stored.checksums,
            "np": sse.nonce_text(cipher)}


def part_stored(stored: Stored, wk) -> Response:
    headers = {"etag": f'"{stored.md5_hex}"', **(wk.headers() if wk else {})}
    for algo, value in stored.checksums.items():
        headers[f"x-amz-checksum-{algo}"] = value
    return Response(200, headers)


def part_copied(stored: Stored, part: dict, wk) -> Response:
    checks = "".join(el(f"Checksum{a.upper()}", v) for a, v in stored.checksums.items())
    return xml_response(xml_doc("CopyPartResult", el("LastModified", iso_time(part["mtime"]))
                                + el("ETag", f'"{stored.md5_hex}"') + checks), headers=wk.headers() if wk else {})


def choose_parts(req: Request, bucket: Bucket, upload_id: str, info: dict, parts: dict, wanted: list,
                 raw: bytes) -> tuple[list, dict, str, int, str]:
    """CompleteMultipartUpload's checks of the part list against the parts kept: (the parts
    chosen, the object's checksums, their type, its size, its ETag)."""
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
        if i < len(wanted) - 1 and part["size"] < MIN_PART_SIZE:
            raise S3Error("EntityTooSmall", UploadId=upload_id, PartNumber=str(n), ProposedSize=str(part["size"]),
                          MinSizeAllowed=str(MIN_PART_SIZE))
    checksums = _composite_checksums(wanted, chosen, _part_checksum_claims(raw), upload_id)
    ck_type = info.get("ck_type") or "COMPOSITE"
    if ck_type == "FULL_OBJECT":
        checksums = _full_object_checksums(info["ck_algo"], chosen, req.headers)
    else:
        checksums.pop("crc64nvme", None)  # CRC64NVME has no COMPOSITE form
    check_claimed_checksums(req.headers, checksums, info.get("ck_algo") or "")
    total = sum(p["size"] for p in chosen)
    bucket.check_quota(total)
    etag = hashlib.md5(b"".join(bytes.fromhex(p["etag"]) for p in chosen)).hexdigest() + f"-{len(chosen)}"
    return chosen, checksums, ck_type, total, etag


def completed_meta(info: dict, chosen: list, checksums: dict) -> dict:
    """The completed object's metadata."""
    meta = dict(info["meta"])
    meta["ck"] = checksums
    if any(p.get("ck") for p in chosen):
        meta["pck"] = [p.get("ck", {}) for p in chosen]
    if info.get("sse"):
        meta["sse"] = sse.completed_meta(info["sse"], [p["np"] for p in chosen])
    return meta


def done_record(req: Request, wanted: list, etag: str, version_id: str, checksums: dict, ck_type: str,
                info: dict) -> dict:
    """What answers a repeated Complete as the first."""
    return {"key": req.key, "parts": [list(p) for p in wanted], "etag": etag, "version_id": version_id,
            "checksums": checksums, "ck_type": ck_type, "sse": sse.describe(info.get("sse"))}


def parts_listed(req: Request, bucket: Bucket, upload_id: str, info: dict, parts: dict) -> Response:
    """ListParts' answer (part-number-marker, max-parts) over an upload's parts by number."""
    try:
        marker = int(req.query.get("part-number-marker", "0") or 0)
        max_parts = min(int(req.query.get("max-parts", "1000")), 1000)
    except ValueError:
        raise S3Error("InvalidArgument", "part-number-marker and max-parts must be integers") from None
    numbers = sorted(n for n in parts if n > marker)
    page, truncated = numbers[:max_parts], len(numbers) > max_parts
    body = [el("Bucket", bucket.name), el("Key", req.key), el("UploadId", upload_id),
            # the Initiator is who created the upload; the Owner is the bucket owner, as S3 names it
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


def uploads_query(req: Request) -> tuple[str, str, str, int]:
    """ListMultipartUploads' (prefix, key-marker, upload-id-marker, max-uploads)."""
    q = req.query
    try:
        limit = min(int(q.get("max-uploads", "1000")), 1000)
    except ValueError:
        raise S3Error("InvalidArgument", "max-uploads must be an integer") from None
    return q.get("prefix", ""), q.get("key-marker", ""), q.get("upload-id-marker", ""), limit


def uploads_listed(bucket: Bucket, prefix: str, key_marker: str, id_marker: str, limit: int,
                   found: list) -> Response:
    """ListMultipartUploads' answer over the uploads under ``prefix``, (key, id, info) sorted."""
    uploads = [u for u in found if (u[0], u[1]) > (key_marker, id_marker)]
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


# -- the local store's handlers

async def create(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """CreateMultipartUpload (STANDARD only; ``x-amz-checksum-algorithm`` with the COMPOSITE
    checksum type: Complete then stores the checksum of the part checksums)."""
    upload_id, info, headers = new_upload(gw, req, bucket)

    def make():
        path = os.path.join(bucket.uploads_dir, upload_id)
        os.makedirs(path)
        write_json_atomic(os.path.join(path, "upload.json"), info, make_dirs=False)
        fsync_dir(bucket.uploads_dir)

    await gw.run(make)
    return created(bucket, req, upload_id, headers)


def _checksum_type(headers: dict[str, str], algo: str) -> str:
    """COMPOSITE or FULL_OBJECT (the default for CRC64NVME, the only type it allows; SHA
    algorithms allow only COMPOSITE), with S3's errors."""
    given = (headers.get("x-amz-checksum-type") or "").upper()
    if given not in ("", "COMPOSITE", "FULL_OBJECT"):
        raise S3Error("InvalidRequest", "Value for x-amz-checksum-type header is invalid.")
    if given and not algo:
        raise S3Error("InvalidRequest", "The x-amz-checksum-type header can only be used with the "
                      "x-amz-checksum-algorithm header.")
    kind = given or ("FULL_OBJECT" if algo == "crc64nvme" else "COMPOSITE")
    if kind == "FULL_OBJECT" and algo and algo not in CRCS:
        raise S3Error("InvalidRequest", f"The FULL_OBJECT checksum type cannot be used with the {algo} checksum "
                      "algorithm.")
    if kind == "COMPOSITE" and algo == "crc64nvme":
        raise S3Error("InvalidRequest", "The COMPOSITE checksum type cannot be used with the crc64nvme checksum "
                      "algorithm.")
    return kind


def _part_number(req: Request) -> int:
    raw = req.query.get("partNumber", "")
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_PARTS:
        raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive",
                      ArgumentName="partNumber", ArgumentValue=raw)
    return n


def _record_part(path: str, number: int, part: dict) -> None:
    meta_path = os.path.join(path, f"{number:05d}.json")
    old = None
    if os.path.exists(meta_path):
        with open(meta_path) as fh:
            old = json.load(fh).get("file")
    write_json_atomic(meta_path, part, make_dirs=False)  # an aborted upload stays gone
    if old and old != part["file"]:
        try:
            os.unlink(old)
        except FileNotFoundError:
            pass


async def upload_part(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """UploadPart: the part is durable before the 200."""
    number = _part_number(req)
    path, info = await gw.run(_load_upload, bucket, req.query["uploadId"], req.key)
    stored, cipher, wk = await store_part(gw, req, bucket, info, dest_dir=os.path.join(path, "parts"))
    await gw.run(_record_part, path, number, new_part(stored, cipher, file=stored.loc["file"]))
    return part_stored(stored, wk)


def _copy_range(value: str, size: int) -> tuple[int, int]:
    """(start, end exclusive) of an x-amz-copy-source-range: ``bytes=first-last`` only
    (InvalidArgument otherwise), inside the source (InvalidRange otherwise)."""
    m = re.fullmatch(r"bytes=(\d+)-(\d+)", value.strip())
    if m is None or int(m.group(1)) > int(m.group(2)):
        raise S3Error("InvalidArgument", "The x-amz-copy-source-range value must be of the form bytes=first-last "
                      "where first and last are the zero-based offsets of the first and last bytes to copy",
                      ArgumentName="x-amz-copy-source-range", ArgumentValue=value)
    first, last = int(m.group(1)), int(m.group(2))
    if last >= size:
        raise S3Error("InvalidRange", "The requested range is not satisfiable", RangeRequested=value,
                      ActualObjectSize=str(size))
    return first, last + 1


async def upload_part_copy(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """UploadPartCopy, with an optional x-amz-copy-source-range."""
    number = _part_number(req)
    path, info = await gw.run(_load_upload, bucket, req.query["uploadId"], req.key)
    stored, cipher, wk = await copy_part(gw, req, bucket, info, dest_dir=os.path.join(path, "parts"),
                                         force_file=True)
    part = new_part(stored, cipher, file=stored.loc["file"])
    await gw.run(_record_part, path, number, part)
    return part_copied(stored, part, wk)


def _part_checksum_claims(body: bytes) -> dict[int, dict[str, str]]:
    """Checksums a CompleteMultipartUpload names per part: {part number: {algorithm: value}}."""
    claims: dict[int, dict[str, str]] = {}
    for part in parse_xml(body).findall("Part"):
        for algo in ALGORITHMS:
            value = child_text(part, f"Checksum{algo.upper()}")
            if value:
                claims.setdefault(int(child_text(part, "PartNumber")), {})[algo] = value
    return claims


def _composite_checksums(wanted: list, chosen: list, claims: dict, upload_id: str) -> dict:
    """The object's composite checksums: for every algorithm that each chosen part has (a part
    copied with UploadPartCopy has none); a part checksum the request names must match."""
    for (n, _), part in zip(wanted, chosen):
        for algo, value in claims.get(n, {}).items():
            if part.get("ck", {}).get(algo) != value:
                raise S3Error("InvalidPart", f"The {algo.upper()} of part {n} does not match the uploaded part",
                              UploadId=upload_id, PartNumber=str(n))
    algos = set(ALGORITHMS)
    for part in chosen:
        algos &= set(part.get("ck", {}))
    return {a: composite(a, [p["ck"][a] for p in chosen]) for a in sorted(algos)}


def _full_object_checksums(algo: str, chosen: list, headers: dict[str, str]) -> dict:
    """The FULL_OBJECT checksum (the CRC of the whole body, from the parts' CRCs); a value the
    Complete request states (``x-amz-checksum-<algo>``) must match it (``BadDigest``)."""
    if not algo or any(algo not in p.get("ck", {}) for p in chosen):
        return {}
    value = full_object(algo, [(p["ck"][algo], p["size"]) for p in chosen])
    claimed = headers.get(f"x-amz-checksum-{algo}")
    if claimed is not None and claimed != value:
        raise S3Error("BadDigest", f"The {algo.upper()} you specified did not match the calculated checksum.")
    return {algo: value}


def check_claimed_checksums(headers: dict[str, str], checksums: dict[str, str], upload_algo: str) -> None:
    """Check the whole-object checksums a Complete request states (``x-amz-checksum-<algo>``)
    against the object's, as S3 does: a value that is not one (base64 of the algorithm's size,
    with ``-N`` for a COMPOSITE checksum) is 400 InvalidRequest, an algorithm the upload has no
    checksum of 400 InvalidRequest, a different value 400 BadDigest. A COMPOSITE value may be
    given with or without its ``-N`` (N the number of parts)."""
    for algo in ALGORITHMS:
        claimed = headers.get(f"x-amz-checksum-{algo}")
        if claimed is None:
            continue
        digest, _, count = claimed.strip().partition("-")
        if not is_checksum_value(algo, digest) or (count and not count.isdigit()):
            raise S3Error("InvalidRequest", f"Value for x-amz-checksum-{algo} header is invalid.")
        value = checksums.get(algo)
        if value is None:
            raise S3Error("InvalidRequest", f"The upload was created using the {upload_algo or 'null'} checksum "
                          f"algorithm. The complete request must use the same checksum algorithm.")
        ours, _, our_count = value.partition("-")
        if digest != ours or (count and count != our_count):
            raise S3Error("BadDigest", f"The {algo.upper()} you specified did not match the calculated checksum.")


def _parse_complete(body: bytes) -> list[tuple[int, str]]:
    root = parse_xml(body)
    if root.tag != "CompleteMultipartUpload":
        raise S3Error("MalformedXML")
    out = []
    for part in root.findall("Part"):
        num, etag = child_text(part, "PartNumber"), child_text(part, "ETag")
        try:
            out.append((int(num), (etag or "").strip().strip('"')))
        except (TypeError, ValueError):
            raise S3Error("MalformedXML", "PartNumber must be an integer") from None
    if not out:
        raise S3Error("MalformedXML", "You must specify at least one part")
    return out


DONE_SUFFIX = ".done"
DONE_KEEP_SECONDS = 24 * 3600


def _done_path(bucket: Bucket, upload_id: str) -> str:
    return _upload_dir(bucket, upload_id) + DONE_SUFFIX


def _complete_result(gw: Gateway, bucket: Bucket, req: Request, done: dict) -> Response:
    # a suspended bucket writes the null version, which S3 does not name in the answer
    headers = {"x-amz-version-id": done["version_id"]} if done["version_id"] != "null" else {}
    headers.update(sse.headers_for(done.get("sse"), keyring=gw.keyring))
    checksums = done.get("checksums", {})
    host = req.headers.get("host", "")
    return xml_response(xml_doc("CompleteMultipartUploadResult",
                                el("Location", f"http://{host}/{bucket.name}/{req.key}") + el("Bucket", bucket.name)
                                + el("Key", req.key) + el("ETag", f'"{done["etag"]}"')
                                + "".join(el(f"Checksum{a.upper()}", v) for a, v in checksums.items())
                                + (el("ChecksumType", done.get("ck_type", "COMPOSITE")) if checksums else "")),
                        headers=headers)


def _repeat_complete(bucket: Bucket, upload_id: str, key: str, wanted: list) -> dict | None:
    """The record of this upload's completion, when the same parts complete it again (S3
    answers a repeated CompleteMultipartUpload as the first one)."""
    try:
        with open(_done_path(bucket, upload_id)) as fh:
            done = json.load(fh)
    except (FileNotFoundError, ValueError):
        return None
    if done.get("key") != key or [list(p) for p in wanted] != done.get("parts"):
        return None
    return done


def _record_done(bucket: Bucket, upload_id: str, done: dict) -> None:
    """Remember a completion (for a repeated Complete), and forget those older than a day."""
    write_json_atomic(_done_path(bucket, upload_id), done, make_dirs=False)
    now = time.time()
    for name in os.listdir(bucket.uploads_dir):
        if name.endswith(DONE_SUFFIX):
            path = os.path.join(bucket.uploads_dir, name)
            try:
                if now - os.stat(path).st_mtime > DONE_KEEP_SECONDS:
                    os.unlink(path)
            except FileNotFoundError:
                pass


async def complete(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """CompleteMultipartUpload: validate the part list, then commit the object durably
    (with If-None-Match / If-Match, only if the condition still holds at the commit)."""
    upload_id = req.query["uploadId"]
    raw = await req.body().read_all(4 * 1024 * 1024)
    wanted = _parse_complete(raw)
    try:
        path, info = await gw.run(_load_upload, bucket, upload_id, req.key)
    except S3Error as err:
        done = await gw.run(_repeat_complete, bucket, upload_id, req.key, wanted) if err.code == "NoSuchUpload" else None
        if done is None:
            raise
        return _complete_result(gw, bucket, req, done)
    conditions = write_conditions(bucket, req.key, req.headers)
    parts = await gw.run(_parts, path)
    chosen, checksums, ck_type, total, etag = choose_parts(req, bucket, upload_id, info, parts, wanted, raw)
    final_dir = os.path.join(bucket.data_dir, f"mpu-{upload_id}")

    def seal() -> list:
        # drop parts that were uploaded but not named, then move the upload into data/
        # (also part files that a crash cut short: they are written in place, never recorded)
        keep = {p["file"] for p in chosen}
        for dirpath, _, files in os.walk(os.path.join(path, "parts")):
            for name in files:
                if os.path.join(dirpath, name) not in keep:
                    try:
                        os.unlink(os.path.join(dirpath, name))
                    except FileNotFoundError:
                        pass
        os.replace(path, final_dir)
        fsync_dir(bucket.uploads_dir)
        fsync_dir(bucket.data_dir)
        return [[p["file"].replace(path, final_dir, 1), p["size"]] for p in chosen]

    def unseal() -> None:  # a conditional complete that lost: the upload stays, as it was
        os.replace(final_dir, path)
        fsync_dir(bucket.data_dir)
        fsync_dir(bucket.uploads_dir)

    locs = await gw.run(seal)
    stored = Stored({"parts": locs, "dir": final_dir}, total, etag, {}, False)
    rec = gw.make_record(bucket, req.key, stored, etag, completed_meta(info, chosen, checksums))
    result = await gw.commit(bucket, Op("put", rec, versioned=bucket.versioning == "Enabled", **conditions))
    if result.precondition:
        await gw.run(unseal)
        raise_precondition(result.precondition, conditions)
    done = done_record(req, wanted, etag, rec.version_id, checksums, ck_type, info)
    await gw.run(_record_done, bucket, upload_id, done)
    resp = _complete_result(gw, bucket, req, done)
    add_expiration(gw, bucket, rec, resp.headers)
    return resp


async def abort(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """AbortMultipartUpload."""
    path, _ = await gw.run(_load_upload, bucket, req.query["uploadId"], req.key)
    await gw.run(shutil.rmtree, path, True)
    return Response(204)


async def list_parts(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """ListParts with part-number-marker and max-parts."""
    upload_id = req.query["uploadId"]
    path, info = await gw.run(_load_upload, bucket, upload_id, req.key)
    return parts_listed(req, bucket, upload_id, info, await gw.run(_parts, path))


async def list_uploads(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """ListMultipartUploads (prefix, key-marker, upload-id-marker, max-uploads)."""
    prefix, key_marker, id_marker, limit = uploads_query(req)

    def scan():
        found = []
        for upload_id in os.listdir(bucket.uploads_dir):
            try:
                with open(os.path.join(bucket.uploads_dir, upload_id, "upload.json")) as fh:
                    info = json.load(fh)
            except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
                continue
            if info["key"].startswith(prefix):
                found.append((info["key"], upload_id, info))
        return sorted(found)

    return uploads_listed(bucket, prefix, key_marker, id_marker, limit, await gw.run(scan))
