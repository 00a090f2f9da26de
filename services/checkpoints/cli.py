"""`strata checkpoint ...`: the checkpoint workflow from a shell, as the API and the SDK offer
it: jobs, begin a version, commit a directory or a manifest file, the latest version, leases,
pins, and moving a version between the hot and the capacity pool (a thin REST client; no
Django, light imports)::

    strata checkpoint create llm --filesystem ckpt --keep-last 3
    strata checkpoint begin llm 1000                # where to write step 1000
    strata checkpoint commit llm 17 --dir /mnt/ckpt/llm/step-1000
    strata checkpoint latest llm
    strata checkpoint lease llm 17 --ttl 600        # then: strata checkpoint release LEASE
"""
from __future__ import annotations

import json
import sys

from plane.cli.jobs import JOB_COLS as JOB_TABLE
from plane.cli.jobs import watch_job
from plumbing.restclient import ApiError
from services.checkpoints.sdk import manifest_of

JOB_COLS = ["name", "tenant", "filesystem", "bucket", "keep_last", "tier_after",
            "capacity_pool"]
VERSION_COLS = ["id", "step", "state", "tier", "size_bytes", "pinned", "committed_at"]
BEGIN_COLS = ["id", "step", "state", "path", "s3_prefix", "nfs_path", "smb_path"]
LEASE_COLS = ["id", "version", "holder", "expires_at"]


def register(sub) -> dict:
    """Add the subcommands; return their handlers."""
    c = sub.add_parser("checkpoint", help="checkpoint jobs and versions").add_subparsers(
        dest="action", required=True)
    c.add_parser("list", help="checkpoint jobs")
    x = c.add_parser("create", help="a training job's checkpoint catalog")
    x.add_argument("name")
    x.add_argument("--filesystem", help="file system the job writes to")
    x.add_argument("--bucket", help="bucket the job writes to")
    x.add_argument("--keep-last", type=int, help="committed versions to keep (default 3)")
    x.add_argument("--keep-every", type=int, help="also keep every K-th step")
    x.add_argument("--tier-after", help="move superseded versions cold after HH:MM:SS")
    x.add_argument("--capacity-pool", help="pool superseded versions move to")
    x = c.add_parser("delete", help="a job without versions")
    x.add_argument("name")
    x = c.add_parser("versions", help="a job's versions, newest first")
    x.add_argument("job")
    x = c.add_parser("begin", help="begin (or join) the version of a step: where to write")
    x.add_argument("job")
    x.add_argument("step", type=int)
    x = c.add_parser("commit", help="verify every shard, then commit and move latest")
    x.add_argument("job")
    x.add_argument("version", type=int, help="version id (from begin)")
    what = x.add_mutually_exclusive_group(required=True)
    what.add_argument("--dir", help="a local directory holding the version's shards: "
                                    "its files (names, sizes, sha256) are the manifest")
    what.add_argument("--manifest", help="a JSON file: [{name, size, sha256?, crc32c?}]")
    x.add_argument("--no-sha256", action="store_true", help="with --dir: sizes only")
    x.add_argument("--location", choices=["path", "s3"], help="where the shards were written")
    x = c.add_parser("latest", help="the newest committed version")
    x.add_argument("job")
    x = c.add_parser("lease", help="hold a version against retention while it is read")
    x.add_argument("job")
    x.add_argument("version", type=int)
    x.add_argument("--ttl", type=int, default=3600, help="seconds (default 3600)")
    x.add_argument("--holder", default="", help="who holds it (shown in the version)")
    x = c.add_parser("release", help="end a lease")
    x.add_argument("lease", type=int)
    for action, what in (("pin", "keep a version whatever the retention rules"),
                         ("unpin", "let retention decide again")):
        x = c.add_parser(action, help=what)
        x.add_argument("job")
        x.add_argument("version", type=int)
        if action == "pin":
            x.add_argument("--reason", default="")
    for action, what in (("tier-down", "move a superseded version to the capacity pool now"),
                         ("prewarm", "bring a cold version back to the hot pool")):
        x = c.add_parser(action, help=what)
        x.add_argument("job")
        x.add_argument("version", type=int, help="version id")
        x.add_argument("--no-wait", action="store_true", help="print the job and return")
    return {"checkpoint": checkpoint}


def _manifest(args) -> list:
    if args.dir:
        return manifest_of(args.dir, sha256=not args.no_sha256)
    try:
        with open(args.manifest) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise ApiError(f"cannot read the manifest {args.manifest}: {exc}") from None


def _commit(c, args, out) -> int:
    body = {"manifest": _manifest(args)}
    if args.location:
        body["location"] = args.location
    try:
        out(c.post(f"checkpoint-jobs/{args.job}/versions/{args.version}/commit/", body),
            VERSION_COLS)
    except ApiError as exc:
        if exc.code != "incomplete":
            raise
        print(f"strata: {exc.detail}", file=sys.stderr)
        for shard in exc.body.get("shards", []):
            print(f"  {shard['name']}: {shard.get('detail') or shard['problem']}",
                  file=sys.stderr)
        return 1
    return 0


def checkpoint(c, args, out):
    versions = f"checkpoint-jobs/{getattr(args, 'job', '')}/versions/"
    if args.action == "list":
        out(c.list("checkpoint-jobs/"), JOB_COLS)
    elif args.action == "create":
        body = {"name": args.name}
        for key in ("filesystem", "bucket", "keep_last", "keep_every", "tier_after",
                    "capacity_pool"):
            if getattr(args, key) is not None:
                body[key] = getattr(args, key)
        out(c.post("checkpoint-jobs/", body), JOB_COLS)
    elif args.action == "delete":
        c.delete(f"checkpoint-jobs/{args.name}/")
    elif args.action == "versions":
        out(c.list(versions), VERSION_COLS)
    elif args.action == "begin":
        out(c.post(versions, {"step": args.step}), BEGIN_COLS)
    elif args.action == "commit":
        return _commit(c, args, out)
    elif args.action == "latest":
        out(c.get(f"checkpoint-jobs/{args.job}/latest/"), VERSION_COLS + ["path", "s3_prefix"])
    elif args.action == "lease":
        out(c.post(f"{versions}{args.version}/lease/",
                   {"ttl_seconds": args.ttl, "holder": args.holder}), LEASE_COLS)
    elif args.action == "release":
        c.delete(f"checkpoint-leases/{args.lease}/")
    elif args.action in ("pin", "unpin"):
        body = {"reason": args.reason} if args.action == "pin" else None
        out(c.post(f"{versions}{args.version}/{args.action}/", body), VERSION_COLS)
    elif args.action in ("tier-down", "prewarm"):
        answer = c.post(f"{versions}{args.version}/{args.action}/")
        if "kind" not in answer:  # pre-warm of a hot version: nothing to do
            out(answer, VERSION_COLS)
        elif args.no_wait:
            out(answer, JOB_TABLE)
        else:
            return watch_job(c, answer["id"], args.json)
    return 0
