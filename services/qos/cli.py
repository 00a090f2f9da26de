"""`strata qos classes show|set CLASS --share N`: the classes of work and their shares.

No Django here: a thin client of /api/v1/qos/classes/.
"""
COLS = ["name", "share", "cpu_shares", "cgroup", "pids", "io_budget_fraction"]


def register(sub) -> dict:
    p = sub.add_parser("qos", help="classes of work (samples, checkpoints, background) and "
                                   "their shares").add_subparsers(dest="what", required=True)
    p = p.add_parser("classes", help="the classes and their shares").add_subparsers(
        dest="action", required=True)
    x = p.add_parser("show", help="every class, or one")
    x.add_argument("name", nargs="?")
    x = p.add_parser("set", help="a class's share (1..10000), applied at once")
    x.add_argument("name", metavar="CLASS")
    x.add_argument("--share", type=int, required=True)
    return {"qos": _qos}


def _qos(client, args, out):
    path = "qos/classes/"
    if args.action == "show":
        if args.name:
            out(client.get(f"{path}{args.name}/"), COLS)
        else:
            out(client.list(path), COLS)
    elif args.action == "set":
        out(client.patch(f"{path}{args.name}/", {"share": args.share}), COLS)
