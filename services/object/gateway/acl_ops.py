"""S3 operations on access settings: ?acl (buckets and objects), ?ownershipControls,
?publicAccessBlock, ?policyStatus, and the ACL and ownership headers of CreateBucket.

The settings live in the bucket's settings (``acl``, ``ownership``, ``public_access_block``),
in memory and in ``bucket.json``; an object's ACL in its version's metadata (see :mod:`.acl`).
"""
from __future__ import annotations

from . import acl
from .access import (OWNERSHIPS, PAB_FIELDS, bucket_grants, check_acl_allowed, check_foreign_object,
                     object_grants, object_owner, policy_is_public)
from .buckets import Bucket
from .core import Gateway
from .errors import S3Error, el, parse_xml, xml_doc
from .index import Op
from .request import Request, Response, xml_response

MAX_ACL_BODY = 64 * 1024


async def _acl_from_request(req: Request, users: acl.Users, owner: str, bucket_owner: str,
                            for_object: bool) -> list:
    """The ACL a PUT ?acl asks for: headers or an AccessControlPolicy body, not both."""
    body = await req.body().read_all(MAX_ACL_BODY)
    grants = acl.from_request(req.headers, users, owner, bucket_owner, for_object)
    if body.strip():
        if grants is not None:
            raise S3Error("UnexpectedContent", "Give the ACL either in headers or in the body, not both")
        body_owner, grants = acl.parse_policy_xml(body, users, (owner, bucket_owner))
        if body_owner != owner:
            raise S3Error("AccessDenied", "The ACL's Owner must be the resource's owner")
        return grants
    if grants is None:
        raise S3Error("MalformedACLError", "Give an ACL: x-amz-acl, x-amz-grant-* or an AccessControlPolicy body")
    return grants


async def get_bucket_acl(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetBucketAcl."""
    return xml_response(acl.to_xml(bucket.owner, bucket_grants(bucket)))


async def put_bucket_acl(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutBucketAcl."""
    grants = await _acl_from_request(req, acl.Users(gw.config["users"]), bucket.owner, bucket.owner, False)
    check_acl_allowed(bucket, grants, req.headers.get("x-amz-acl"))
    await gw.run(bucket.set_setting, "acl", None if grants == acl.owner_only(bucket.owner) else grants)
    return Response(200)


async def _version(gw: Gateway, req: Request, bucket: Bucket):
    """The version ?acl is about (the current one unless ``versionId``), as GetObject finds it."""
    vid = req.query.get("versionId") or None
    rec = bucket.index.get(req.key, vid)
    if rec is None:
        if vid is not None:
            raise S3Error("NoSuchVersion", Key=req.key, VersionId=vid)
        raise S3Error("NoSuchKey", Key=req.key)
    if rec.marker:
        headers = {"x-amz-delete-marker": "true", "x-amz-version-id": rec.version_id}
        raise S3Error("MethodNotAllowed" if vid else "NoSuchKey", headers=headers)
    return rec


async def get_object_acl(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetObjectAcl (of the current version, or of ``versionId``)."""
    rec = await _version(gw, req, bucket)
    check_foreign_object(req, bucket, rec.meta, "s3:GetObjectVersionAcl" if "versionId" in req.query
                         else "s3:GetObjectAcl", req.key)
    headers = {"x-amz-version-id": rec.version_id} if bucket.versioning else {}
    return xml_response(acl.to_xml(object_owner(bucket, rec.meta), object_grants(bucket, rec.meta)),
                        headers=headers)


async def put_object_acl(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutObjectAcl (replaces the version's ACL; its owner stays)."""
    rec = await _version(gw, req, bucket)
    check_foreign_object(req, bucket, rec.meta, "s3:PutObjectVersionAcl" if "versionId" in req.query
                         else "s3:PutObjectAcl", req.key)
    owner = object_owner(bucket, rec.meta)
    grants = await _acl_from_request(req, acl.Users(gw.config["users"]), owner, bucket.owner, True)
    check_acl_allowed(bucket, grants, req.headers.get("x-amz-acl"))
    meta = dict(rec.meta)
    meta.pop("acl", None)
    if grants != acl.owner_only(owner):
        meta["acl"] = grants
    await gw.commit(bucket, Op("set_meta", key=rec.key, version_id=rec.version_id, meta=meta))
    return Response(200, {"x-amz-version-id": rec.version_id} if bucket.versioning else {})


async def get_ownership(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetBucketOwnershipControls."""
    ownership = bucket.settings.get("ownership")
    if not ownership:
        raise S3Error("OwnershipControlsNotFoundError", BucketName=bucket.name)
    return xml_response(xml_doc("OwnershipControls", f"<Rule>{el('ObjectOwnership', ownership)}</Rule>"))


def _check_ownership(value: str | None) -> str:
    if value not in OWNERSHIPS:
        raise S3Error("MalformedXML" if value is None else "InvalidArgument",
                      f"ObjectOwnership must be one of {', '.join(OWNERSHIPS)}",
                      ArgumentName="ObjectOwnership", ArgumentValue=str(value))
    return value


def _acl_is_owner_only(bucket: Bucket) -> bool:
    """Whether the bucket ACL gives its owner FULL_CONTROL and nobody anything else."""
    grants = bucket.settings.get("acl")
    return grants is None or acl.only_owner_full_control(grants, bucket.owner)


async def put_ownership(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutBucketOwnershipControls (exactly one rule)."""
    root = parse_xml(await req.body().read_all(MAX_ACL_BODY))
    rules = root.findall("Rule") if root.tag == "OwnershipControls" else []
    if len(rules) != 1:
        raise S3Error("MalformedXML", "OwnershipControls holds exactly one Rule")
    ownership = _check_ownership(rules[0].findtext("ObjectOwnership"))
    if ownership == "BucketOwnerEnforced" and not _acl_is_owner_only(bucket):
        # ACLs cannot be turned off while the bucket ACL grants anyone but its owner (S3)
        raise S3Error("InvalidBucketAclWithObjectOwnership")
    await gw.run(bucket.set_setting, "ownership", ownership)
    return Response(200)


async def delete_ownership(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeleteBucketOwnershipControls (ACLs work again, as under ObjectWriter)."""
    await gw.run(bucket.set_setting, "ownership", None)
    return Response(204)


async def get_public_access_block(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetPublicAccessBlock."""
    pab = bucket.settings.get("public_access_block")
    if pab is None:
        raise S3Error("NoSuchPublicAccessBlockConfiguration", BucketName=bucket.name)
    return xml_response(xml_doc("PublicAccessBlockConfiguration",
                                "".join(el(f, bool(pab.get(f))) for f in PAB_FIELDS)))


def parse_public_access_block(body: bytes) -> dict:
    """The four flags of a PublicAccessBlockConfiguration document (absent ones are false)."""
    root = parse_xml(body)
    if root.tag != "PublicAccessBlockConfiguration":
        raise S3Error("MalformedXML", "The root element must be PublicAccessBlockConfiguration")
    out = {}
    for field in PAB_FIELDS:
        text = (root.findtext(field) or "false").strip().lower()
        if text not in ("true", "false"):
            raise S3Error("MalformedXML", f"{field} must be true or false")
        out[field] = text == "true"
    return out


async def put_public_access_block(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """PutPublicAccessBlock."""
    pab = parse_public_access_block(await req.body().read_all(MAX_ACL_BODY))
    await gw.run(bucket.set_setting, "public_access_block", pab)
    return Response(200)


async def delete_public_access_block(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """DeletePublicAccessBlock."""
    await gw.run(bucket.set_setting, "public_access_block", None)
    return Response(204)


async def get_policy_status(gw: Gateway, req: Request, bucket: Bucket) -> Response:
    """GetBucketPolicyStatus: whether the bucket policy is public."""
    doc = bucket.settings.get("policy")
    if not doc:
        raise S3Error("NoSuchBucketPolicy", BucketName=bucket.name)
    return xml_response(xml_doc("PolicyStatus", el("IsPublic", policy_is_public(doc))))


def access_info(bucket: Bucket) -> dict:
    """A bucket's access settings as the admin interface reports them."""
    return {"acl": acl.canned_name(bucket.settings.get("acl"), bucket.owner),
            "public_access_block": bucket.settings.get("public_access_block"),
            "ownership": bucket.settings.get("ownership")}


async def set_access(gw: Gateway, bucket: Bucket, data: dict) -> dict:
    """Apply the admin interface's ``{"acl": CANNED, "public_access_block": {..}|null,
    "ownership": NAME|null}`` (each optional), checked as the S3 operations check them."""
    changes = {}
    if "ownership" in data:
        changes["ownership"] = None if data["ownership"] is None else _check_ownership(data["ownership"])
    if "public_access_block" in data:
        pab = data["public_access_block"]
        if pab is not None and (not isinstance(pab, dict) or set(pab) - set(PAB_FIELDS)
                                or not all(isinstance(v, bool) for v in pab.values())):
            raise S3Error("InvalidArgument", "public_access_block maps " + ", ".join(PAB_FIELDS) + " to booleans")
        changes["public_access_block"] = None if pab is None else {f: bool(pab.get(f)) for f in PAB_FIELDS}
    if "acl" in data:
        if data["acl"] not in acl.CANNED[:4]:
            raise S3Error("InvalidArgument", "acl must be one of " + ", ".join(acl.CANNED[:4]))
        grants = acl.canned(data["acl"], bucket.owner, bucket.owner, False)
        changes["acl"] = None if grants == acl.owner_only(bucket.owner) else grants
    enforced = changes.get("ownership", bucket.settings.get("ownership")) == "BucketOwnerEnforced"
    if enforced and changes.get("acl", bucket.settings.get("acl")) is not None:
        raise S3Error("InvalidBucketAclWithObjectOwnership")
    blocks = changes.get("public_access_block", bucket.settings.get("public_access_block")) or {}
    if blocks.get("BlockPublicAcls") and acl.is_public(changes.get("acl")):
        raise S3Error("InvalidBucketState", "A public ACL is refused while the bucket's public access block "
                      "has BlockPublicAcls")
    if changes:
        await gw.run(bucket.update_settings, changes)
    return access_info(bucket)


def create_settings(gw: Gateway, req: Request) -> dict:
    """Settings a CreateBucket asks for with x-amz-acl / x-amz-grant-* / x-amz-object-ownership,
    validated before the bucket is made (so a bad header leaves nothing behind)."""
    if not req.auth.user:
        raise S3Error("AccessDenied", "Anonymous users cannot create buckets", resource=f"/{req.bucket}")
    owner = req.auth.user
    out = {}
    ownership = req.headers.get("x-amz-object-ownership")
    if ownership is not None:
        out["ownership"] = _check_ownership(ownership)
    grants = acl.from_request(req.headers, acl.Users(gw.config["users"]), owner, owner, for_object=False)
    if grants is not None and grants != acl.owner_only(owner):
        if ownership == "BucketOwnerEnforced":
            raise S3Error("InvalidBucketAclWithObjectOwnership")
        out["acl"] = grants
    return out


async def apply_create_settings(gw: Gateway, bucket: Bucket, settings: dict) -> None:
    """Store what :func:`create_settings` returned on the new bucket."""
    if settings:
        await gw.run(bucket.update_settings, settings)

