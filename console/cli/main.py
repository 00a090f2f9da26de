"""The `strata` command: `strata up` runs the appliance; the rest is a thin REST client.

A service adds subcommands with `services/<name>/cli.py` (no Django, light imports):
`register(subparsers) -> {command: handler}` where `handler(client, args, out) -> int | None`
and `out(data, columns)` prints a table or JSON. A handler marked `local = True` works on this
machine without the appliance (it gets no client: `strata ceph dev-cluster`).
"""
import argparse
import json
import os
import sys

from console.cli import node
from console.supervisor import add_service_arguments, up
from plane.cli.jobs import JOB_COLS, watch_job
from plane.cli.output import show
from plane.discovery import modules_named
from plumbing.restclient import ApiError, RestClient
from services.object import up as object_up

def _parser() -> tuple[argparse.ArgumentParser, dict]:
    p = argparse.ArgumentParser(prog="strata", description="Strata storage appliance")
    p.add_argument("--data-dir", default=None,
                   help="data directory holding credentials.json (default ./var)")
    p.add_argument("--json", action="store_true", help="print JSON")
    sub = p.add_subparsers(dest="cmd", required=True)

    up_cmd = sub.add_parser("up", help="run the appliance in the foreground")
    up_cmd.add_argument("--host", default="127.0.0.1")
    up_cmd.add_argument("--port", type=int, default=8080)
    up_cmd.add_argument("--data-host", default=None,
                        help="address the data services (S3, NFS, SMB, iSCSI, NBD) listen on "
                             "and tell clients, when it is not --host: e.g. the storage "
                             "network's address while the console stays on 127.0.0.1 "
                             "(--s3-host, --file-bind, --block-host override it per service)")
    up_cmd.add_argument("--default-pool-size", default="10G")
    up_cmd.add_argument("--tls", action="store_true",
                        help="serve the API, the console and S3 over TLS (HTTPS)")
    up_cmd.add_argument("--tls-cert", default=None,
                        help="PEM certificate (chain) for --tls (default: one Strata makes at "
                             "the first start and keeps in DATA_DIR/tls)")
    up_cmd.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    add_service_arguments(up_cmd)

    plane = sub.add_parser("plane", help="run the plane alone (web, Celery worker and beat) "
                           "against STRATA_DATABASE_URL and STRATA_REDIS_URL; no data daemons")
    plane.add_argument("--host", default="127.0.0.1")
    plane.add_argument("--port", type=int, default=8080)
    plane.add_argument("--tls", action="store_true", help="serve the API and console over TLS")
    plane.add_argument("--tls-cert", default=None, help="PEM certificate (chain) for --tls")
    plane.add_argument("--tls-key", default=None, help="PEM private key of --tls-cert")
    plane.add_argument("--s3-pool", default=None,
                       help="pool of the cluster's S3 buckets (with --s3-store rados: a Ceph "
                            "pool; S3 waits while it does not exist)")
    object_up.add_store_argument(plane)

    sub.add_parser("health", help="component states")

    job = sub.add_parser("job").add_subparsers(dest="action", required=True)
    x = job.add_parser("list"); x.add_argument("--state")
    x = job.add_parser("show"); x.add_argument("id", type=int)
    x = job.add_parser("watch"); x.add_argument("id", type=int)
    x = job.add_parser("cancel"); x.add_argument("id", type=int)

    handlers = node.register(sub)
    for module in modules_named("cli"):
        handlers.update(module.register(sub))
    return p, handlers


def run(args, handlers: dict | None = None) -> int:
    if args.cmd == "up":
        common = {"cmd", "data_dir", "json", "host", "port", "default_pool_size"}
        options = {k: v for k, v in vars(args).items() if k not in common}
        return up(args.data_dir or "var", args.host, args.port, args.default_pool_size, options)
    if args.cmd == "plane":
        options = {"tls": args.tls, "tls_cert": args.tls_cert, "tls_key": args.tls_key,
                   "plane_only": True, "s3_pool": args.s3_pool, "s3_store": args.s3_store}
        return up(args.data_dir or "var", args.host, args.port, "0", options)
    out = lambda data, cols: show(data, cols, args.json)  # noqa: E731
    handler = (handlers or {}).get(args.cmd)
    if getattr(handler, "local", False):  # works on this machine without the appliance
        return handler(None, args, out) or 0
    c = RestClient.from_environment(args.data_dir)
    if handler:
        return handler(c, args, out) or 0
    if args.cmd == "health":
        print(json.dumps(c.get("health"), indent=2))
        return 0
    if args.cmd == "job":
        if args.action == "list":
            out(c.list("jobs/", **({"state": args.state} if args.state else {})), JOB_COLS)
        elif args.action == "show":
            out(c.get(f"jobs/{args.id}/"), JOB_COLS + ["error", "result"])
        elif args.action == "watch":
            return watch_job(c, args.id, args.json)
        elif args.action == "cancel":
            out(c.post(f"jobs/{args.id}/cancel/"), JOB_COLS)
    return 0


def main(argv=None) -> int:
    parser, handlers = _parser()
    args = parser.parse_args(argv)
    try:
        return run(args, handlers)
    except ApiError as exc:
        print(f"strata: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `strata ... | head`: the reader left; end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
