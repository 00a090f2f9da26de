"""The admin interface under ``/_strata/admin/`` (JSON, ``Authorization: Bearer <admin_token>``).

The management plane calls it through :mod:`services.object.admin_client`; the routes are
listed in services/object/README.md. Errors are JSON ``{"error": CODE, "message": TEXT}`` with
the HTTP status of the matching S3 error.
"""
from __future__ import annotations

import hmac
import json
import os
import sqlite3

from . import protection_ops, snapshots
from .admission import ADMISSION
from .acl_ops import access_info, set_access
from .compaction import collect_all_orphans, compact_once
from .core import Gateway
from .cors import check_rules
from .policy import parse_policy
from .errors import S3Error
from .lifecycle import apply_lifecycle
from .request import Request, Response


def _json(data, status: int = 200) -> Response:
    return Response(status, {"content-type": "application/json"}, json.dumps(data).encode())


def _error(code: str, message: str, status: int) -> Response:
    return _json({"error": code, "message": message}, status)


def _check_quota_value(name: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise S3Error("InvalidArgument", f"quota '{name}' must be a non-negative integer or null")
    return value


async def handle(gw: Gateway, req: Request, path: str) -> Response:
    """Serve one admin request; ``path`` is what follows ``/_strata/admin/``."""
    token = gw.config.get("admin_token") or ""
    given = req.headers.get("authorization", "")
    if not token or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return _error("AccessDenied", "Send Authorization: Bearer <admin_token> from the gateway config", 403)
    try:
        return await _route(gw, req, [p for p in path.split("/") if p])
    except S3Error as err:
        return _error(err.code, err.message, err.status)


async def _body(req: Request) -> dict:
    raw = await req.body().read_all(1024 * 1024)
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise S3Error("InvalidArgument", f"request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise S3Error("InvalidArgument", "request body must be a JSON object")
    return data


async def _route(gw: Gateway, req: Request, parts: list[str]) -> Response:
    m = req.method
    if parts == ["health"] and m == "GET":
        return _json({"status": "ok", "buckets": len(gw.buckets.buckets), "pid": os.getpid(),
                      "worker": gw.role.slot if gw.role is not None else None})
    if parts == ["admission"] and m == "GET":   # this worker's slots by class of work
        return _json({"pid": os.getpid(), "classes": ADMISSION.stats()})
    if parts == ["compact"] and m == "POST":
        return _json(await compact_once(gw))
    if parts == ["gc"] and m == "POST":
        if gw.kind == "rados":   # the sweep of the pool (rados_sweep), its own grace if none given
            return _json(await gw.sweep(float(req.query["min_age"]) if "min_age" in req.query else None))
        min_age = float(req.query.get("min_age", "600"))
        return _json(await collect_all_orphans(gw, min_age))
    if parts == ["lifecycle"] and m == "POST":
        return _json(await apply_lifecycle(gw))
    if parts == ["buckets"]:
        if m == "GET":
            return _json({"buckets": _all_info(gw)})
        if m == "POST":
            data = await _body(req)
            name, owner = data.get("name"), data.get("owner")
            if not name or not owner:
                raise S3Error("InvalidArgument", "creating a bucket needs 'name' and 'owner'")
            bucket = await gw.run(gw.buckets.create, name, owner, gw.config["region"])
            if data.get("versioning"):
                await gw.run(bucket.set_versioning, data["versioning"])
            if data.get("quota"):
                await _set_quota(gw, bucket, data["quota"])
            if data.get("object_lock"):
                await gw.run(bucket.set_versioning, "Enabled")
                await protection_ops.admin_set_lock(gw, bucket, data["object_lock"])
            return _json(_info(bucket), 201)
    if len(parts) >= 2 and parts[0] == "buckets":
        bucket = gw.buckets.get(parts[1])
        rest = parts[2:]
        if not rest:
            if m == "GET":
                return _json(_info(bucket))
            if m == "DELETE":
                await gw.run(gw.buckets.delete, bucket.name)
                return Response(204)
        elif rest == ["quota"]:
            if m == "GET":
                return _json(bucket.settings.get("quota") or {})
            if m == "PUT":
                return _json(await _set_quota(gw, bucket, await _body(req)))
        elif rest == ["versioning"]:
            if m == "GET":
                return _json({"status": bucket.versioning or "Disabled"})
            if m == "PUT":
                status = (await _body(req)).get("status")
                if status not in ("Enabled", "Suspended"):
                    raise S3Error("InvalidArgument", "versioning 'status' must be Enabled or Suspended")
                await gw.run(bucket.set_versioning, status)
                return _json({"status": bucket.versioning or "Disabled"})
        elif rest == ["encryption"] and m == "PUT":
            return _json(await protection_ops.admin_set_encryption(gw, bucket, await _body(req)))
        elif rest == ["object-lock"] and m == "PUT":
            return _json(await protection_ops.admin_set_lock(gw, bucket, await _body(req)))
        elif rest == ["access"]:
            if m == "GET":
                return _json(access_info(bucket))
            if m == "PUT":
                return _json(await set_access(gw, bucket, await _body(req)))
        elif rest in (["policy"], ["cors"]):
            return await _access_setting(gw, req, bucket, rest[0])
        elif rest[0] in ("snapshots", "changes"):
            if gw.kind == "rados":
                from .rados_store import not_implemented   # librados: only in gateways of that store
                raise not_implemented("bucket snapshots and the change feed")
            return await _snapshot_route(gw, req, bucket, rest)
    return _error("NotFound", f"no admin route {m} /{'/'.join(parts)}", 404)


async def _access_setting(gw: Gateway, req: Request, bucket, name: str) -> Response:
    """GET/PUT/DELETE a bucket's policy (``{"policy": DOC|null}``) or CORS rules (``{"rules":
    [RULE]|null}``, RULE as S3's JSON), validated as PutBucketPolicy / PutBucketCors do."""
    field = "policy" if name == "policy" else "rules"
    if req.method == "PUT":
        data = await _body(req)
        if name == "policy":
            doc = data.get("policy")
            if not isinstance(doc, dict):
                raise S3Error("MalformedPolicy", "'policy' must be a JSON object")
            value = parse_policy(json.dumps(doc).encode(), bucket.name)
        else:
            value = check_rules(data.get("rules"))
        await gw.run(bucket.set_setting, name, value)
    elif req.method == "DELETE":
        await gw.run(bucket.set_setting, name, None)
        return Response(204)
    elif req.method != "GET":
        return _error("MethodNotAllowed", f"{req.method} is not allowed on {name}", 405)
    return _json({field: bucket.settings.get(name)})


async def _snapshot_route(gw: Gateway, req: Request, bucket, rest: list[str]) -> Response:
    """Bucket snapshots and the change feed of bucket replication (see :mod:`.snapshots`)."""
    m, q = req.method, req.query
    try:
        if rest == ["changes"] and m == "GET":
            return _json(await snapshots.changes(gw, bucket, int(q.get("after", "0")), int(q.get("limit", "1000"))))
        if rest == ["snapshots"]:
            if m == "GET":
                return _json({"snapshots": await gw.run(bucket.snapshots.list)})
            if m == "POST":
                return _json(await snapshots.create(gw, bucket, (await _body(req)).get("name")), 201)
        if len(rest) == 2 and rest[0] == "snapshots":
            if m == "GET":
                info = await gw.run(bucket.snapshots.get, rest[1])
                if q.get("entries"):
                    rows = await gw.run(bucket.snapshots.entries, rest[1], q.get("after", ""),
                                        max(1, min(int(q.get("max_keys", "1000")), 5000)))
                    info["entries"] = [{"key": k, "version_id": v, "size": s, "etag": e} for k, v, s, e in rows]
                return _json(info)
            if m == "DELETE":
                await snapshots.delete(gw, bucket, rest[1])
                return Response(204)
        if len(rest) == 3 and rest[0] == "snapshots" and rest[2] == "restore" and m == "POST":
            data = await _body(req)
            if not data.get("target"):
                raise S3Error("InvalidArgument", "restoring a snapshot needs 'target' (an existing bucket)")
            return _json(await snapshots.restore_page(
                gw, bucket, rest[1], data["target"], after=data.get("after") or "",
                max_keys=int(data.get("max_keys") or snapshots.PAGE_KEYS),
                max_bytes=int(data.get("max_bytes") or snapshots.PAGE_BYTES)))
    except (TypeError, ValueError) as exc:
        raise S3Error("InvalidArgument", f"bad number in the request: {exc}") from None
    return _error("NotFound", f"no admin route {m} /buckets/{bucket.name}/{'/'.join(rest)}", 404)


def _all_info(gw: Gateway) -> list[dict]:
    """BUCKET of every bucket. One that another worker deletes while this one lists (its
    directory renamed away before this worker has seen the change: SQLite cannot open its
    index) is left out, as if the listing came a moment later, instead of a 500."""
    if gw.kind == "rados":   # one op per bucket, nothing renamed away under it
        return [_info(bucket) for _, bucket in sorted(gw.buckets.buckets.items())]
    out = []
    for _, bucket in sorted(gw.buckets.buckets.items()):
        try:
            info = _info(bucket)
        except (sqlite3.Error, OSError):
            if os.path.exists(bucket.settings_path):
                raise
            continue
        if os.path.exists(bucket.settings_path):  # (its open index files may outlive it)
            out.append(info)
    return out


def _info(bucket) -> dict:
    """BUCKET as the admin interface reports it: settings, usage, access settings, encryption and lock."""
    return {**bucket.usage(), **access_info(bucket), **protection_ops.admin_info(bucket)}


async def _set_quota(gw: Gateway, bucket, data: dict) -> dict:
    quota = {"bytes": _check_quota_value("bytes", data.get("bytes")),
             "objects": _check_quota_value("objects", data.get("objects"))}
    quota = {k: v for k, v in quota.items() if v is not None}
    await gw.run(bucket.set_setting, "quota", quota)
    return quota
