"""`strata bucket ...`, `strata s3-key ...` and `strata kms-key ...` (a thin REST client; no
Django, light imports).

`strata s3-key create` prints the secret: the only time it is shown.
"""
from __future__ import annotations

import argparse
import json
import sys

from plane.cli.jobs import parse_size, watch_job

BUCKET_COLS = ["name", "owner", "pool", "versioning", "used_bytes", "used_objects", "quota_bytes",
               "quota_objects"]
PROTECTION_COLS = ["encryption", "kms_key_id", "object_lock", "lock_mode", "lock_days"]
ACCESS_COLS = ["acl", "public_access_block", "object_ownership"]
KEY_COLS = ["access_key", "user", "admin", "description", "created_by", "created_at"]
KMS_COLS = ["key_id", "alias", "key_state", "description", "arn", "created_by", "created_at"]


def _size_or_none(text: str):
    return None if text.lower() in ("none", "unlimited") else parse_size(text)


def _count_or_none(text: str):
    if text.lower() in ("none", "unlimited"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (a whole number or 'none')") from None


CANNED_ACLS = ["private", "public-read", "public-read-write", "authenticated-read"]
OWNERSHIPS = ["BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter"]
PAB_FLAGS = {"block-public-acls": "BlockPublicAcls", "ignore-public-acls": "IgnorePublicAcls",
             "block-public-policy": "BlockPublicPolicy", "restrict-public-buckets": "RestrictPublicBuckets"}


def _public_access_flags(text: str):
    """None for 'none', every flag for 'all', else the named flags on and the others off."""
    if text == "none":
        return None
    names = list(PAB_FLAGS) if text == "all" else [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in PAB_FLAGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown flag(s) {', '.join(unknown) or text!r}: use all, none or "
                                         + ", ".join(PAB_FLAGS))
    return {PAB_FLAGS[n]: True for n in names}


def register(sub) -> dict:
    """Add the subcommands; return their handlers."""
    b = sub.add_parser("bucket", help="S3 buckets").add_subparsers(dest="action", required=True)
    b.add_parser("list")
    x = b.add_parser("show"); x.add_argument("name")
    x = b.add_parser("create"); x.add_argument("name")
    x.add_argument("--owner", help="S3 user owning it (default: you)")
    x.add_argument("--quota", type=_size_or_none, help="bytes, e.g. 100G")
    x.add_argument("--max-objects", type=_count_or_none)
    x.add_argument("--versioning", action="store_true", help="enable versioning")
    x.add_argument("--object-lock", action="store_true", help="Object Lock (WORM; turns versioning on for good)")
    x.add_argument("--encryption", choices=["AES256", "aws:kms"], help="default encryption of new objects")
    x.add_argument("--kms-key-id", help="with --encryption aws:kms")
    x = b.add_parser("set-quota"); x.add_argument("name")
    x.add_argument("--quota", type=_size_or_none, default=argparse.SUPPRESS,
                   help="bytes, or none to lift it")
    x.add_argument("--max-objects", type=_count_or_none, default=argparse.SUPPRESS,
                   help="objects, or none to lift it")
    x = b.add_parser("versioning"); x.add_argument("name")
    x.add_argument("status", choices=["Enabled", "Suspended"])
    x = b.add_parser("encryption", help="default encryption of new objects")
    x.add_argument("name"); x.add_argument("algorithm", choices=["AES256", "aws:kms", "none"])
    x.add_argument("--kms-key-id", help="with aws:kms (default: the appliance's aws/s3 key)")
    x = b.add_parser("object-lock", help="turn Object Lock on (versioning must be Enabled) and set "
                     "the default retention of new versions")
    x.add_argument("name")
    x.add_argument("--mode", choices=["GOVERNANCE", "COMPLIANCE"], help="default retention mode")
    x.add_argument("--days", type=int, help="default retention in days (with --mode)")
    x = b.add_parser("set-acl", help="the bucket's canned ACL"); x.add_argument("name")
    x.add_argument("acl", choices=CANNED_ACLS)
    x = b.add_parser("public-access", help="S3 Block Public Access of the bucket"); x.add_argument("name")
    x.add_argument("flags", type=_public_access_flags,
                   help="all, none (no block), or a comma list of " + ", ".join(PAB_FLAGS))
    x = b.add_parser("set-ownership", help="S3 Object Ownership (BucketOwnerEnforced turns ACLs off)")
    x.add_argument("name"); x.add_argument("ownership", choices=OWNERSHIPS + ["none"])
    x = b.add_parser("delete"); x.add_argument("name")
    b.add_parser("lifecycle-run", help="apply every bucket's lifecycle rules now (a job)")
    for setting, what in (("policy", "a bucket policy document (JSON)"),
                          ("cors", "CORS rules (JSON: a list, or {\"CORSRules\": [...]} as the aws CLI takes)")):
        x = b.add_parser(setting, help=f"show, set or delete the bucket's {setting}")
        x.add_argument("op", choices=["get", "set", "delete"])
        x.add_argument("name")
        x.add_argument("file", nargs="?", help=f"for set: a file holding {what}; - reads stdin")

    k = sub.add_parser("s3-key", help="S3 access keys").add_subparsers(dest="action", required=True)
    k.add_parser("list")
    x = k.add_parser("create", help="prints the secret key once")
    x.add_argument("--user", help="S3 user the key acts as (default: you)")
    x.add_argument("--admin", action="store_true", help="the key sees every bucket")
    x.add_argument("--description", default="")
    x = k.add_parser("delete", help="revoke at once"); x.add_argument("access_key")

    m = sub.add_parser("kms-key", help="SSE-KMS keys kept by the appliance").add_subparsers(
        dest="action", required=True)
    m.add_parser("list")
    for action, what in (("show", "show a key"), ("enable", "objects under it can be written and read again"),
                         ("disable", "refuse new objects under it and reads of its objects")):
        m.add_parser(action, help=what).add_argument("key", help="key id, alias/NAME or ARN")
    x = m.add_parser("create", help="a new key (random material, sealed at rest)")
    x.add_argument("--alias", help="alias/NAME (or NAME)")
    x.add_argument("--description", default="")
    return {"bucket": bucket, "s3-key": s3_key, "kms-key": kms_key}


def bucket(c, args, out):
    if args.action == "list":
        out(c.list("buckets/"), BUCKET_COLS)
    elif args.action == "show":
        out(c.get(f"buckets/{args.name}/"), BUCKET_COLS + ACCESS_COLS + PROTECTION_COLS + ["filesystem", "created_at"])
    elif args.action == "create":
        body = {"name": args.name, "quota_bytes": args.quota, "quota_objects": args.max_objects,
                "versioning": "Enabled" if args.versioning or args.object_lock else "Disabled",
                "object_lock": args.object_lock, "encryption": args.encryption or "",
                "kms_key_id": args.kms_key_id or ""}
        if args.owner:
            body["owner"] = args.owner
        out(c.post("buckets/", body), BUCKET_COLS + PROTECTION_COLS)
    elif args.action == "encryption":
        body = {"encryption": "" if args.algorithm == "none" else args.algorithm,
                "kms_key_id": args.kms_key_id or ""}
        out(c.patch(f"buckets/{args.name}/", body), ["name"] + PROTECTION_COLS)
    elif args.action == "object-lock":
        body = {"object_lock": True, "lock_mode": args.mode or "", "lock_days": args.days}
        out(c.patch(f"buckets/{args.name}/", body), ["name"] + PROTECTION_COLS)
    elif args.action == "set-quota":
        body = {}
        if hasattr(args, "quota"):
            body["quota_bytes"] = args.quota
        if hasattr(args, "max_objects"):
            body["quota_objects"] = args.max_objects
        out(c.patch(f"buckets/{args.name}/", body), BUCKET_COLS)
    elif args.action == "versioning":
        out(c.patch(f"buckets/{args.name}/", {"versioning": args.status}), BUCKET_COLS)
    elif args.action == "set-acl":
        out(c.patch(f"buckets/{args.name}/", {"acl": args.acl}), BUCKET_COLS + ACCESS_COLS)
    elif args.action == "public-access":
        out(c.patch(f"buckets/{args.name}/", {"public_access_block": args.flags}), BUCKET_COLS + ACCESS_COLS)
    elif args.action == "set-ownership":
        ownership = "" if args.ownership == "none" else args.ownership
        out(c.patch(f"buckets/{args.name}/", {"object_ownership": ownership}), BUCKET_COLS + ACCESS_COLS)
    elif args.action == "delete":
        c.delete(f"buckets/{args.name}/")
    elif args.action == "lifecycle-run":
        return watch_job(c, c.post("s3-lifecycle-runs/")["id"], args.json)
    elif args.action in ("policy", "cors"):
        return _access_setting(c, args)


def _access_setting(c, args):
    """`strata bucket policy|cors get|set|delete NAME [FILE]`: the setting as JSON."""
    path = f"buckets/{args.name}/{args.action}/"
    field = "policy" if args.action == "policy" else "rules"
    if args.op == "delete":
        c.delete(path)
        return None
    if args.op == "get":
        value = c.get(path)[field]
    else:
        if not args.file:
            raise SystemExit(f"strata: bucket {args.action} set: name a JSON file (or - for stdin)")
        try:
            text = sys.stdin.read() if args.file == "-" else open(args.file).read()
            value = json.loads(text)
        except OSError as exc:
            raise SystemExit(f"strata: cannot read {args.file}: {exc.strerror}") from None
        except ValueError as exc:
            raise SystemExit(f"strata: {args.file} is not JSON: {exc}") from None
        if args.action == "cors" and isinstance(value, dict) and "CORSRules" in value:
            value = value["CORSRules"]
        value = c.request("PUT", path, json={field: value})[field]
    print(json.dumps(value, indent=2))
    return None


def s3_key(c, args, out):
    if args.action == "list":
        out(c.list("s3-keys/"), KEY_COLS)
    elif args.action == "create":
        body = {"admin": args.admin, "description": args.description}
        if args.user:
            body["user"] = args.user
        made = c.post("s3-keys/", body)
        out(made, ["access_key", "secret_key", "user", "admin", "endpoint"])
        if not args.json:
            print("The secret key is shown only now: store it.")
    elif args.action == "delete":
        c.delete(f"s3-keys/{args.access_key}/")


def _kms_path(ref: str) -> str:
    """The API path of a key named by id, alias/NAME or ARN (the API takes the id or NAME)."""
    tail = ref.split(":", 5)[-1] if ref.startswith("arn:") else ref
    for prefix in ("key/", "alias/"):
        if tail.startswith(prefix):
            tail = tail[len(prefix):]
    return f"kms-keys/{tail}/"


def kms_key(c, args, out):
    if args.action == "list":
        out(c.list("kms-keys/"), KMS_COLS)
    elif args.action == "show":
        out(c.get(_kms_path(args.key)), KMS_COLS + ["updated_at"])
    elif args.action == "create":
        body = {"description": args.description}
        if args.alias:
            body["alias"] = args.alias
        out(c.post("kms-keys/", body), KMS_COLS)
    elif args.action in ("enable", "disable"):
        out(c.post(_kms_path(args.key) + f"{args.action}/"), KMS_COLS)
