"""`strata node ...`: join tokens, joining a host, the node agent, and the cluster's nodes.

``token create``, ``list``, ``show``, ``cordon``, ``uncordon``, ``drain``, ``remove`` and
``assign`` are admin calls of the REST API (credentials as every command's); ``join`` talks
to the plane with the join token only and writes the node's configuration; ``run`` is the
agent (:mod:`console.agent`)."""
import argparse
import json
from pathlib import Path

from console import agent
from plumbing.atomic import write_atomic
from plumbing.restclient import ApiError, RestClient

NODE_COLS = ["name", "state", "schedule", "management_address", "data_address",
             "floating_address", "services", "last_heartbeat", "daemons"]


def register(sub) -> dict:
    node = sub.add_parser("node", help="the cluster's nodes: join, run the agent, manage")
    act = node.add_subparsers(dest="action", required=True)
    token = act.add_parser("token", help="join tokens").add_subparsers(dest="what",
                                                                       required=True)
    x = token.add_parser("create", help="a one-use join token (prints it on the last line)")
    x.add_argument("--ttl", type=int, default=None, help="seconds it is good for (default 3600)")
    x = act.add_parser("join", help="join this host to a cluster's plane")
    x.add_argument("--plane", required=True, help="the plane's URL (http[s]://HOST:PORT)")
    x.add_argument("--token", required=True, help="a join token from `strata node token create`")
    x.add_argument("--name", required=True, help="this node's name (unique in the cluster)")
    x.add_argument("--management-address", required=True)
    x.add_argument("--data-address", required=True)
    x.add_argument("--config", default=agent.DEFAULT_CONFIG,
                   help=f"where to write what the node needs (default {agent.DEFAULT_CONFIG})")
    x.add_argument("--ca-bundle", default=None, help="CA certificate of the plane's TLS")
    x = act.add_parser("run", help="the node agent (foreground)")
    x.add_argument("--config", default=agent.DEFAULT_CONFIG)
    x.add_argument("--data-dir", default=argparse.SUPPRESS,
                   help=f"the node's state (default {agent.DEFAULT_DATA_DIR})")
    x.add_argument("--report-only", action="store_true",
                   help="heartbeat for `strata up`'s daemons, run none (used by `strata up`)")
    act.add_parser("list", help="the nodes")
    for name, text in (("show", "one node"), ("cordon", "take no new assignments"),
                       ("uncordon", "take assignments again"),
                       ("drain", "move what can move to other nodes"),
                       ("remove", "take it out of the cluster; revoke its credential")):
        act.add_parser(name, help=text).add_argument("name")
    x = act.add_parser("assign", help="set the services a node runs, their options and the "
                                      "node's floating data address")
    x.add_argument("name")
    x.add_argument("--services", default=None, help="comma-separated: block,file,object")
    x.add_argument("--floating-address", default=None, metavar="A.B.C.D/P",
                   help="an address keepalived keeps on this node and moves to a survivor "
                        "when it dies (10.0.0.101/24; '' for none)")
    x.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a `strata up` option for its daemons (iscsi_port=3260, ...)")
    handle.local = True
    return {"node": handle}


def handle(_client, args, out) -> int:
    if args.action == "join":
        return join(args)
    if args.action == "run":
        data = getattr(args, "data_dir", None) or agent.DEFAULT_DATA_DIR
        return agent.Agent(agent.load_config(args.config), Path(data),
                           report_only=args.report_only).run()
    c = RestClient.from_environment(args.data_dir)
    if args.action == "token":
        answer = c.post("nodes/tokens/", {} if args.ttl is None else {"ttl": args.ttl})
        if args.json:
            print(json.dumps(answer))
        else:
            print(f"join token, one use, expires {answer['expires_at']}:\n{answer['token']}")
        return 0
    row = (lambda node: node) if args.json else _row  # noqa: E731  (tables: daemons as text)
    if args.action == "list":
        out([row(n) for n in c.list("nodes/")], NODE_COLS)
    elif args.action == "show":
        node = c.get(f"nodes/{args.name}/")
        out(row(node), NODE_COLS + ["serves", "version", "heartbeat_age_s"])
    elif args.action in ("cordon", "uncordon"):
        out(row(c.post(f"nodes/{args.name}/{args.action}/")), NODE_COLS)
    elif args.action == "drain":
        answer = c.post(f"nodes/{args.name}/drain/")
        if args.json:
            print(json.dumps(answer))
        else:
            moved = ", ".join(f"{s} -> {n}" for s, n in answer["moved"].items()) or "nothing"
            print(f"{answer['name']} drained; moved: {moved}")
    elif args.action == "remove":
        c.delete(f"nodes/{args.name}/")
        print(f"{args.name} removed; its credential no longer works")
    elif args.action == "assign":
        options = dict(_option(o) for o in args.option)
        body = {}
        if args.services is not None:
            body["services"] = [s for s in args.services.split(",") if s]
        if options:
            body["options"] = options
        if args.floating_address is not None:
            body["floating_address"] = args.floating_address
        if not body:
            raise ApiError("assign: say what to set: --services, --option or "
                           "--floating-address")
        out(row(c.patch(f"nodes/{args.name}/", body)), NODE_COLS)
    return 0


def _option(text: str) -> tuple:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ApiError(f"--option {text!r}: KEY=VALUE")
    return key.replace("-", "_"), int(value) if value.isdigit() else value


def _row(node: dict) -> dict:
    """A node for the table: its daemons as "name state" pairs."""
    daemons = node.get("daemons") or {}
    serves = node.get("serves") or {}
    return {**node, "daemons": ", ".join(f"{k} {v.get('state')}" for k, v
                                         in sorted(daemons.items())) or "-",
            "serves": "; ".join(f"{kind}: {', '.join(names)}" for kind, names
                                in sorted(serves.items()) if names) or "-"}


def join(args) -> int:
    """Register this host with the plane and write its configuration (0600); idempotent: a
    configuration whose credential the plane still takes for this name is left as it is."""
    path = Path(args.config)
    existing = _read(path)
    if existing.get("name") == args.name and existing.get("credential"):
        try:
            me = agent.plane_client(existing).get("nodes/self/")
        except ApiError as exc:
            if exc.status != 401:
                raise
        else:
            if me.get("name") == args.name:
                print(f"already joined: node {args.name} of {existing['plane_url']} ({path})")
                return 0
    client = RestClient(args.plane, "", timeout=30, verify=args.ca_bundle)
    answer = client.post("nodes/join/", {
        "token": args.token, "name": args.name, "version": agent.version(),
        "management_address": args.management_address, "data_address": args.data_address})
    config = {"plane_url": client.root, "name": answer["name"],
              "credential": answer["credential"], "database_url": answer["database_url"],
              "redis_url": answer["redis_url"], "secret_key": answer["secret_key"],
              "management_address": args.management_address,
              "data_address": args.data_address, "ca_bundle": args.ca_bundle}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(config, indent=2) + "\n", mode=0o600)
    print(f"joined: node {args.name} of {client.root}; configuration in {path}")
    return 0


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
