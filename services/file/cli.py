"""`strata nfs-export ...`, `strata smb-share ...`, `strata smb-user ...` (a thin REST client;
no Django, light imports)."""
from __future__ import annotations

import sys

from plane.cli.jobs import watch_job

EXPORT_COLS = ["id", "pseudo", "filesystem", "path", "clients", "state", "error"]
SHARE_COLS = ["name", "filesystem", "path", "read_only", "valid_users", "encrypt", "state",
              "error"]
USER_COLS = ["username", "state", "error", "created_at"]
CLIENT_HELP = ("ADDRESS|CIDR|* [rw|ro] [root_squash|all_squash|no_root_squash] "
               "[anonuid=USER|UID] [anongid=GROUP|GID], e.g. '10.0.0.0/24 rw no_root_squash' or "
               "'10.0.0.0/24 rw root_squash anonuid=alice anongid=alice' (squashed clients "
               "write as alice); repeat")


def register(sub) -> dict:
    """Add the subcommands; return their handlers."""
    e = sub.add_parser("nfs-export", help="NFSv4 exports").add_subparsers(dest="action",
                                                                          required=True)
    e.add_parser("list")
    x = e.add_parser("create")
    x.add_argument("filesystem")
    x.add_argument("--client", action="append", required=True, dest="clients", help=CLIENT_HELP)
    x.add_argument("--path", default="", help="directory inside the file system")
    x.add_argument("--pseudo", help="NFSv4 pseudo path (default /<filesystem>)")
    x = e.add_parser("show", help="one export, its entries (nodes) and mount commands")
    x.add_argument("id", type=int)
    x = e.add_parser("set-clients")
    x.add_argument("id", type=int)
    x.add_argument("--client", action="append", required=True, dest="clients", help=CLIENT_HELP)
    x = e.add_parser("delete")
    x.add_argument("id", type=int)
    e.add_parser("reconcile", help="re-apply every export, share and user (a job)")

    s = sub.add_parser("smb-share", help="SMB3 shares").add_subparsers(dest="action",
                                                                      required=True)
    s.add_parser("list")
    x = s.add_parser("create")
    x.add_argument("name")
    x.add_argument("filesystem")
    x.add_argument("--path", default="", help="directory inside the file system")
    x.add_argument("--read-only", action="store_true")
    x.add_argument("--valid-user", action="append", default=[], dest="valid_users",
                   help="SMB user allowed (repeat); none: every SMB user")
    x.add_argument("--encrypt", action="store_true", help="require SMB3 encryption")
    x.add_argument("--grant-access", action="store_true",
                   help="let the valid users write the share's directory (POSIX ACL)")
    x = s.add_parser("delete")
    x.add_argument("name")

    u = sub.add_parser("smb-user", help="SMB users").add_subparsers(dest="action",
                                                                   required=True)
    u.add_parser("list")
    for action in ("create", "set-password"):
        x = u.add_parser(action)
        x.add_argument("username")
        x.add_argument("--password", help="default: asked for (or one line on stdin)")
    x = u.add_parser("delete")
    x.add_argument("username")
    return {"nfs-export": nfs_export, "smb-share": smb_share, "smb-user": smb_user}


def nfs_export(c, args, out):
    if args.action == "list":
        out(c.list("nfs-exports/"), EXPORT_COLS)
    elif args.action == "create":
        body = {"filesystem": args.filesystem, "path": args.path, "clients": args.clients}
        if args.pseudo:
            body["pseudo"] = args.pseudo
        out(c.post("nfs-exports/", body), EXPORT_COLS)
    elif args.action == "show":
        row = c.get(f"nfs-exports/{args.id}/")
        out(row, EXPORT_COLS)
        if not args.json:
            for e in row["entries"]:
                mark = " (recommended)" if e == row["recommended"] else ""
                print(f"entry {e['node']} {e['address']}:{e['port']} {e['state']}{mark}: "
                      f"{e['mount']}")
    elif args.action == "set-clients":
        out(c.patch(f"nfs-exports/{args.id}/", {"clients": args.clients}), EXPORT_COLS)
    elif args.action == "delete":
        c.delete(f"nfs-exports/{args.id}/")
    elif args.action == "reconcile":
        return watch_job(c, c.post("nfs-exports/reconcile/")["id"], args.json)
    return 0


def smb_share(c, args, out):
    if args.action == "list":
        out(c.list("smb-shares/"), SHARE_COLS)
    elif args.action == "create":
        out(c.post("smb-shares/", {"name": args.name, "filesystem": args.filesystem,
                                   "path": args.path, "read_only": args.read_only,
                                   "valid_users": args.valid_users,
                                   "encrypt": args.encrypt,
                                   "grant_access": args.grant_access}), SHARE_COLS)
    elif args.action == "delete":
        c.delete(f"smb-shares/{args.name}/")
    return 0


def _password(args) -> str:
    if args.password:
        return args.password
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    import getpass

    first = getpass.getpass(f"Password for {args.username}: ")
    if getpass.getpass("Again: ") != first:
        raise SystemExit("error: the passwords differ")
    return first


def smb_user(c, args, out):
    if args.action == "list":
        out(c.list("smb-users/"), USER_COLS)
    elif args.action == "create":
        out(c.post("smb-users/", {"username": args.username, "password": _password(args)}),
            USER_COLS)
    elif args.action == "set-password":
        out(c.patch(f"smb-users/{args.username}/", {"password": _password(args)}), USER_COLS)
    elif args.action == "delete":
        c.delete(f"smb-users/{args.username}/")
    return 0
