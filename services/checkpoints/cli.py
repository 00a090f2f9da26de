"""`strata checkpoint ...`: checkpoint jobs, their versions, and moving a version between
the hot and the capacity pool by hand (a thin REST client; no Django, light imports)."""
from __future__ import annotations

from plane.cli.jobs import JOB_COLS as JOB_TABLE
from plane.cli.jobs import watch_job

JOB_COLS = ["name", "tenant", "filesystem", "bucket", "keep_last", "tier_after",
            "capacity_pool"]
VERSION_COLS = ["id", "step", "state", "tier", "size_bytes", "pinned", "committed_at"]


def register(sub) -> dict:
    """Add the subcommands; return their handlers."""
    c = sub.add_parser("checkpoint", help="checkpoint jobs and versions").add_subparsers(
        dest="action", required=True)
    c.add_parser("list", help="checkpoint jobs")
    x = c.add_parser("versions", help="a job's versions, newest first")
    x.add_argument("job")
    for action, what in (("tier-down", "move a superseded version to the capacity pool now"),
                         ("prewarm", "bring a cold version back to the hot pool")):
        x = c.add_parser(action, help=what)
        x.add_argument("job")
        x.add_argument("version", type=int, help="version id")
        x.add_argument("--no-wait", action="store_true", help="print the job and return")
    return {"checkpoint": checkpoint}


def checkpoint(c, args, out):
    if args.action == "list":
        out(c.list("checkpoint-jobs/"), JOB_COLS)
    elif args.action == "versions":
        out(c.list(f"checkpoint-jobs/{args.job}/versions/"), VERSION_COLS)
    elif args.action in ("tier-down", "prewarm"):
        answer = c.post(f"checkpoint-jobs/{args.job}/versions/{args.version}/{args.action}/")
        if "kind" not in answer:  # pre-warm of a hot version: nothing to do
            out(answer, VERSION_COLS)
        elif args.no_wait:
            out(answer, JOB_TABLE)
        else:
            return watch_job(c, answer["id"], args.json)
    return 0
