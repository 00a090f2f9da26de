"""The `strata` command: `strata up` runs the appliance; the rest is a thin REST client.

A service adds subcommands with `services/<name>/cli.py` (no Django, light imports):
`register(subparsers) -> {command: handler}` where `handler(client, args, out) -> int | None`
and `out(data, columns)` prints a table or JSON.
"""
import argparse
import json
import sys

from plane.cli.jobs import JOB_COLS, parse_size as _size, watch_job
from plane.cli.output import show
from plane.discovery import modules_named
from plumbing.restclient import ApiError, RestClient

POOL_COLS = ["name", "driver", "redundancy", "media", "state", "size_bytes", "used_bytes"]
FS_COLS = ["name", "pool", "quota_bytes", "used_bytes", "state", "path"]
VOL_COLS = ["name", "pool", "size_bytes", "used_bytes", "state", "path"]
SNAP_COLS = ["id", "name", "filesystem", "volume", "state", "created_at"]
def _parser() -> tuple[argparse.ArgumentParser, dict]:
    p = argparse.ArgumentParser(prog="strata", description="Strata storage appliance")
    p.add_argument("--data-dir", default=None,
                   help="data directory holding credentials.json (default ./var)")
    p.add_argument("--json", action="store_true", help="print JSON")
    sub = p.add_subparsers(dest="cmd", required=True)

    up = sub.add_parser("up", help="run the appliance in the foreground")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8080)
    up.add_argument("--default-pool-size", default="10G")
    from console.supervisor import add_service_arguments

    add_service_arguments(up)

    sub.add_parser("health", help="component states")

    pool = sub.add_parser("pool").add_subparsers(dest="action", required=True)
    pool.add_parser("list")
    x = pool.add_parser("show"); x.add_argument("name")
    x = pool.add_parser("create"); x.add_argument("name")
    x.add_argument("--device", action="append", default=[], dest="devices",
                   help="PATH or image:SIZE, optionally PATH@FAULT_DOMAIN; repeat")
    x.add_argument("--redundancy", default="none", choices=["none", "mirror", "mirror3", "raid10"])
    x.add_argument("--media", default="flash", choices=["flash", "capacity"])
    x.add_argument("--driver", choices=["local", "directory", "spdk"])
    x = pool.add_parser("delete"); x.add_argument("name")
    x = pool.add_parser("scrub"); x.add_argument("name")
    x.add_argument("--no-wait", action="store_true")

    fs = sub.add_parser("fs", aliases=["filesystem"]).add_subparsers(dest="action", required=True)
    fs.add_parser("list")
    x = fs.add_parser("show"); x.add_argument("name")
    x = fs.add_parser("create"); x.add_argument("name"); x.add_argument("--pool")
    x.add_argument("--quota", type=_size)
    x = fs.add_parser("set-quota"); x.add_argument("name")
    x.add_argument("quota", help="size, or 'none'")
    x = fs.add_parser("delete"); x.add_argument("name")

    vol = sub.add_parser("volume").add_subparsers(dest="action", required=True)
    vol.add_parser("list")
    x = vol.add_parser("show"); x.add_argument("name")
    x = vol.add_parser("create"); x.add_argument("name"); x.add_argument("size", type=_size)
    x.add_argument("--pool")
    x = vol.add_parser("resize"); x.add_argument("name"); x.add_argument("size", type=_size)
    x = vol.add_parser("delete"); x.add_argument("name")

    snap = sub.add_parser("snapshot").add_subparsers(dest="action", required=True)
    x = snap.add_parser("list"); x.add_argument("--filesystem"); x.add_argument("--volume")
    x = snap.add_parser("create"); x.add_argument("name")
    g = x.add_mutually_exclusive_group(required=True)
    g.add_argument("--filesystem"); g.add_argument("--volume")
    x = snap.add_parser("delete"); x.add_argument("id", type=int)
    x = snap.add_parser("clone"); x.add_argument("id", type=int); x.add_argument("name")

    job = sub.add_parser("job").add_subparsers(dest="action", required=True)
    x = job.add_parser("list"); x.add_argument("--state")
    x = job.add_parser("show"); x.add_argument("id", type=int)
    x = job.add_parser("watch"); x.add_argument("id", type=int)
    x = job.add_parser("cancel"); x.add_argument("id", type=int)

    handlers = {}
    for module in modules_named("cli"):
        handlers.update(module.register(sub))
    return p, handlers


def _device(text: str) -> dict:
    path, _, domain = text.partition("@")
    return {"path": path, "fault_domain": domain or "default"}


def run(args, handlers: dict | None = None) -> int:
    if args.cmd == "up":
        from console.supervisor import up

        common = {"cmd", "data_dir", "json", "host", "port", "default_pool_size"}
        options = {k: v for k, v in vars(args).items() if k not in common}
        return up(args.data_dir or "var", args.host, args.port, args.default_pool_size, options)
    c = RestClient.from_environment(args.data_dir)
    out = lambda data, cols: show(data, cols, args.json)  # noqa: E731
    if handlers and args.cmd in handlers:
        return handlers[args.cmd](c, args, out) or 0
    if args.cmd == "health":
        print(json.dumps(c.get("health"), indent=2))
        return 0
    if args.cmd == "pool":
        if args.action == "list":
            out(c.list("pools/"), POOL_COLS)
        elif args.action == "show":
            out(c.get(f"pools/{args.name}/"), POOL_COLS + ["devices", "error"])
        elif args.action == "create":
            body = {"name": args.name, "devices": [_device(d) for d in args.devices],
                    "redundancy": args.redundancy, "media": args.media}
            if args.driver:
                body["driver"] = args.driver
            out(c.post("pools/", body), POOL_COLS)
        elif args.action == "delete":
            c.delete(f"pools/{args.name}/")
        elif args.action == "scrub":
            job = c.post(f"pools/{args.name}/scrub/")
            if args.no_wait:
                out(job, JOB_COLS)
                return 0
            return watch_job(c, job["id"], args.json)
    elif args.cmd in ("fs", "filesystem"):
        if args.action == "list":
            out(c.list("filesystems/"), FS_COLS)
        elif args.action == "show":
            out(c.get(f"filesystems/{args.name}/"), FS_COLS + ["error"])
        elif args.action == "create":
            body = {"name": args.name, "quota_bytes": args.quota}
            if args.pool:
                body["pool"] = args.pool
            out(c.post("filesystems/", body), FS_COLS)
        elif args.action == "set-quota":
            quota = None if args.quota.lower() == "none" else _size(args.quota)
            out(c.patch(f"filesystems/{args.name}/", {"quota_bytes": quota}), FS_COLS)
        elif args.action == "delete":
            c.delete(f"filesystems/{args.name}/")
    elif args.cmd == "volume":
        if args.action == "list":
            out(c.list("volumes/"), VOL_COLS)
        elif args.action == "show":
            out(c.get(f"volumes/{args.name}/"), VOL_COLS + ["error"])
        elif args.action == "create":
            body = {"name": args.name, "size_bytes": args.size}
            if args.pool:
                body["pool"] = args.pool
            out(c.post("volumes/", body), VOL_COLS)
        elif args.action == "resize":
            out(c.post(f"volumes/{args.name}/resize/", {"size_bytes": args.size}), VOL_COLS)
        elif args.action == "delete":
            c.delete(f"volumes/{args.name}/")
    elif args.cmd == "snapshot":
        if args.action == "list":
            params = {k: v for k, v in (("filesystem", args.filesystem),
                                        ("volume", args.volume)) if v}
            out(c.list("snapshots/", **params), SNAP_COLS)
        elif args.action == "create":
            body = {"name": args.name, "filesystem": args.filesystem, "volume": args.volume}
            out(c.post("snapshots/", body), SNAP_COLS)
        elif args.action == "delete":
            c.delete(f"snapshots/{args.id}/")
        elif args.action == "clone":
            out(c.post(f"snapshots/{args.id}/clone/", {"name": args.name}), ["name", "pool", "path"])
    elif args.cmd == "job":
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


if __name__ == "__main__":
    sys.exit(main())
