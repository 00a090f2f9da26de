"""`strata` subcommands of the protection service: schedules, replication, backups, bucket
snapshots and bucket replication.

No Django here: a thin client of /api/v1/snapshot-schedules/, replication-peers/,
replications/, replicas/, backup-targets/, backups/, restore-points/, bucket-snapshots/
and bucket-replications/.
"""
from plane.cli.jobs import watch_job

SCHEDULE_COLS = ["name", "filesystem", "volume", "bucket", "cron", "every_minutes",
                 "keep_last", "enabled", "last_snapshot", "last_error"]
PEER_COLS = ["name", "url", "state", "remote_user", "error"]
REPLICATION_COLS = ["name", "filesystem", "volume", "peer", "target_name", "state",
                    "lag_seconds", "last_snapshot", "error"]
REPLICA_COLS = ["name", "kind", "pool", "last_snapshot", "last_received_at", "promoted_to"]
TARGET_COLS = ["name", "endpoint_url", "bucket", "prefix"]
BACKUP_COLS = ["name", "source_kind", "source_name", "target", "state", "restore_points",
               "last_run_at", "error"]
POINT_COLS = ["id", "backup", "snapshot", "full", "stream_bytes", "stored_bytes", "created_at"]
BUCKET_SNAP_COLS = ["id", "objects", "bytes", "created_at"]
BUCKET_REPL_COLS = ["name", "bucket", "target", "every_minutes", "state", "lag_seconds",
                    "last_versions", "last_deletes", "error"]


def _source(x, bucket=False) -> None:
    g = x.add_mutually_exclusive_group(required=True)
    g.add_argument("--filesystem", "--fs", dest="filesystem")
    g.add_argument("--volume")
    if bucket:
        g.add_argument("--bucket", help="an S3 bucket (needs versioning Enabled)")


def _crud(sub, name, help_, extra_actions=()) -> dict:
    p = sub.add_parser(name, help=help_).add_subparsers(dest="action", required=True)
    p.add_parser("list")
    x = p.add_parser("show"); x.add_argument("name")
    x = p.add_parser("delete"); x.add_argument("name")
    return {a: p.add_parser(a) for a in ("create", *extra_actions)}


def _schedule_options(x, required: bool) -> None:
    when = x.add_mutually_exclusive_group(required=required)
    when.add_argument("--cron", help='five fields in UTC, e.g. "0 * * * *"')
    when.add_argument("--every", type=int, dest="every_minutes", help="minutes")
    for k in ("last", "hourly", "daily", "weekly"):
        x.add_argument(f"--keep-{k}", type=int, dest=f"keep_{k}")


def register(sub) -> dict:
    p = _crud(sub, "schedule", "snapshot schedules", ["update", "run"])
    x = p["create"]; x.add_argument("name"); _source(x, bucket=True)
    _schedule_options(x, required=True)
    x = p["update"]; x.add_argument("name")
    _schedule_options(x, required=False)
    on = x.add_mutually_exclusive_group()
    on.add_argument("--enable", dest="enabled", action="store_const", const=True)
    on.add_argument("--disable", dest="enabled", action="store_const", const=False)
    p["run"].add_argument("name")

    p = _crud(sub, "peer", "replication peers (other appliances)", ["check"])
    x = p["create"]; x.add_argument("name"); x.add_argument("url")
    x.add_argument("--token", required=True, help="an API token of the other appliance")
    p["check"].add_argument("name")

    p = _crud(sub, "replication", "replication of a file system or volume to a peer",
              ["sync", "failback"])
    x = p["create"]; x.add_argument("name"); _source(x)
    x.add_argument("--peer", required=True); x.add_argument("--target-pool", required=True)
    x.add_argument("--target-name"); x.add_argument("--every", type=int, dest="every_minutes")
    p["sync"].add_argument("name")
    p["failback"].add_argument("name")
    p["failback"].add_argument("--abandon", action="store_true",
                               help="forget a failback that cannot complete")

    p = sub.add_parser("replica", help="replicas received from peers").add_subparsers(
        dest="action", required=True)
    p.add_parser("list")
    x = p.add_parser("promote"); x.add_argument("name"); x.add_argument("new_name")

    p = _crud(sub, "backup-target", "S3 endpoints that hold backups")
    x = p["create"]; x.add_argument("name"); x.add_argument("endpoint_url")
    x.add_argument("--bucket", required=True); x.add_argument("--prefix", default="")
    x.add_argument("--access-key", required=True); x.add_argument("--secret-key", required=True)
    x.add_argument("--region", default="us-east-1")

    p = _crud(sub, "backup", "backups of a file system or volume", ["run"])
    x = p["create"]; x.add_argument("name"); _source(x)
    x.add_argument("--target", required=True); x.add_argument("--every", type=int,
                                                               dest="every_minutes")
    p["run"].add_argument("name")

    p = sub.add_parser("restore-point", help="the backup catalog").add_subparsers(
        dest="action", required=True)
    x = p.add_parser("list"); x.add_argument("--backup")
    x = p.add_parser("restore"); x.add_argument("id", type=int); x.add_argument("name")
    x.add_argument("--pool")

    p = sub.add_parser("bucket-snapshot", help="snapshots of S3 buckets").add_subparsers(
        dest="action", required=True)
    x = p.add_parser("list"); x.add_argument("--bucket")
    x = p.add_parser("create"); x.add_argument("bucket"); x.add_argument("--name")
    for a in ("show", "delete"):
        x = p.add_parser(a); x.add_argument("id", help="BUCKET/NAME")
    x = p.add_parser("restore", help="copy into a new bucket (a job)")
    x.add_argument("id", help="BUCKET/NAME"); x.add_argument("new_bucket")

    p = _crud(sub, "bucket-replication",
              "replication of a bucket's new versions to an S3 target", ["sync"])
    x = p["create"]; x.add_argument("name"); x.add_argument("--bucket", required=True)
    x.add_argument("--target", required=True, help="a backup target (S3 endpoint and bucket)")
    x.add_argument("--every", type=int, dest="every_minutes")
    p["sync"].add_argument("name")

    return {"schedule": _schedule, "peer": _peer, "replication": _replication,
            "replica": _replica, "backup-target": _target, "backup": _backup,
            "restore-point": _restore_point, "bucket-snapshot": _bucket_snapshot,
            "bucket-replication": _bucket_replication}


def _body(args, *keys) -> dict:
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def _watch(client, job, args) -> int:
    return watch_job(client, job["id"], args.json)


def _common(client, args, out, path, cols) -> bool:
    if args.action == "list":
        out(client.list(path), cols)
    elif args.action == "show":
        out(client.get(f"{path}{args.name}/"), cols)
    elif args.action == "delete":
        client.delete(f"{path}{args.name}/")
    else:
        return False
    return True


def _schedule(client, args, out):
    path = "snapshot-schedules/"
    if _common(client, args, out, path, SCHEDULE_COLS):
        return 0
    when = ("cron", "every_minutes", "keep_last", "keep_hourly", "keep_daily", "keep_weekly")
    if args.action == "create":
        out(client.post(path, _body(args, "name", "filesystem", "volume", "bucket", *when)),
            SCHEDULE_COLS)
    elif args.action == "update":
        out(client.patch(f"{path}{args.name}/", _body(args, *when, "enabled")), SCHEDULE_COLS)
    elif args.action == "run":
        return _watch(client, client.post(f"{path}{args.name}/run/"), args)


def _peer(client, args, out):
    path = "replication-peers/"
    if _common(client, args, out, path, PEER_COLS):
        return 0
    if args.action == "create":
        out(client.post(path, _body(args, "name", "url", "token")), PEER_COLS)
    elif args.action == "check":
        out(client.post(f"{path}{args.name}/check/"), PEER_COLS)


def _replication(client, args, out):
    path = "replications/"
    if _common(client, args, out, path, REPLICATION_COLS):
        return 0
    if args.action == "create":
        out(client.post(path, _body(args, "name", "filesystem", "volume", "peer",
                                    "target_pool", "target_name", "every_minutes")),
            REPLICATION_COLS)
    elif args.action == "failback" and args.abandon:
        out(client.post(f"{path}{args.name}/failback/", {"abandon": True}), REPLICATION_COLS)
    elif args.action in ("sync", "failback"):
        return _watch(client, client.post(f"{path}{args.name}/{args.action}/"), args)


def _replica(client, args, out):
    if args.action == "list":
        out(client.list("replicas/"), REPLICA_COLS)
    else:
        out(client.post(f"replicas/{args.name}/promote/", {"name": args.new_name}),
            ["name", "pool", "path"])


def _target(client, args, out):
    path = "backup-targets/"
    if _common(client, args, out, path, TARGET_COLS):
        return 0
    out(client.post(path, _body(args, "name", "endpoint_url", "bucket", "prefix",
                                "access_key", "secret_key", "region")), TARGET_COLS)


def _backup(client, args, out):
    path = "backups/"
    if _common(client, args, out, path, BACKUP_COLS):
        return 0
    if args.action == "create":
        out(client.post(path, _body(args, "name", "filesystem", "volume", "target",
                                    "every_minutes")), BACKUP_COLS)
    elif args.action == "run":
        return _watch(client, client.post(f"{path}{args.name}/run/"), args)


def _restore_point(client, args, out):
    if args.action == "list":
        params = {"backup": args.backup} if args.backup else {}
        out(client.list("restore-points/", **params), POINT_COLS)
    else:
        return _watch(client, client.post(f"restore-points/{args.id}/restore/",
                                          _body(args, "name", "pool")), args)


def _bucket_snapshot(client, args, out):
    path = "bucket-snapshots/"
    if args.action == "list":
        params = {"bucket": args.bucket} if args.bucket else {}
        out(client.list(path, **params), BUCKET_SNAP_COLS)
    elif args.action == "create":
        out(client.post(path, _body(args, "bucket", "name")), BUCKET_SNAP_COLS)
    elif args.action == "show":
        out(client.get(f"{path}{args.id}/"), BUCKET_SNAP_COLS)
    elif args.action == "delete":
        client.delete(f"{path}{args.id}/")
    else:
        return _watch(client, client.post(f"{path}{args.id}/restore/",
                                          {"bucket": args.new_bucket}), args)


def _bucket_replication(client, args, out):
    path = "bucket-replications/"
    if _common(client, args, out, path, BUCKET_REPL_COLS):
        return 0
    if args.action == "create":
        out(client.post(path, _body(args, "name", "bucket", "target", "every_minutes")),
            BUCKET_REPL_COLS)
    elif args.action == "sync":
        return _watch(client, client.post(f"{path}{args.name}/sync/"), args)
