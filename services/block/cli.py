"""`strata host`, `strata host-group` and `strata block-export`: the block service's CLI.

No Django here (a thin REST client, see console/cli/main.py)::

    strata host create db1 --iqn iqn.1994-05.com.redhat:db1 --chap-user db1 --chap-secret ...
    strata host-group create dbs --host db1
    strata block-export create vol1 --protocol iscsi --host-group dbs
    strata block-export qos 3 --bps-write 10000000      # live, nbd/vhost-user-blk/nvmf
"""
import json
import sys

from plumbing.restclient import ApiError

HOST_COLS = ["name", "iqn", "nqn", "address", "chap_user", "groups"]
GROUP_COLS = ["name", "hosts", "target_iqn", "mutual_chap_user"]
EXPORT_COLS = ["id", "volume", "protocol", "host_group", "allow_any", "read_only", "state",
               "connection", "error"]
QOS = ("iops_read", "iops_write", "iops_total", "bps_read", "bps_write", "bps_total")


def _qos_args(parser) -> None:
    for key in QOS:
        parser.add_argument("--" + key.replace("_", "-"), type=int, dest=key,
                            help="0 = unlimited" + (" (bytes/s)" if key.startswith("bps") else ""))


def register(subparsers) -> dict:
    """Add the subcommands; return {command: handler}."""
    host = subparsers.add_parser("host", help="client machines (IQN, NQN, CHAP)")
    host = host.add_subparsers(dest="action", required=True)
    host.add_parser("list")
    x = host.add_parser("create")
    x.add_argument("name")
    for opt in ("--iqn", "--nqn", "--address", "--chap-user", "--chap-secret"):
        x.add_argument(opt)
    x = host.add_parser("delete")
    x.add_argument("name")

    group = subparsers.add_parser("host-group", help="hosts that see the same LUNs")
    group = group.add_subparsers(dest="action", required=True)
    group.add_parser("list")
    x = group.add_parser("create")
    x.add_argument("name")
    x.add_argument("--host", action="append", default=[], dest="hosts", help="repeat")
    x.add_argument("--mutual-chap-user")
    x.add_argument("--mutual-chap-secret")
    x = group.add_parser("set-hosts")
    x.add_argument("name")
    x.add_argument("hosts", nargs="*")
    x = group.add_parser("delete")
    x.add_argument("name")

    exp = subparsers.add_parser("block-export",
                                help="volumes over iscsi, nbd, vhost-user-blk, nvmf")
    exp = exp.add_subparsers(dest="action", required=True)
    x = exp.add_parser("list")
    x.add_argument("--volume")
    x = exp.add_parser("show")
    x.add_argument("id", type=int)
    x = exp.add_parser("create")
    x.add_argument("volume")
    x.add_argument("--protocol", default="iscsi",
                   choices=["iscsi", "nbd", "vhost-user-blk", "nvmf"])
    x.add_argument("--host-group", help="only these hosts may attach")
    x.add_argument("--allow-any", action="store_true",
                   help="every initiator that reaches the address may attach (NBD needs it)")
    x.add_argument("--read-only", action="store_true")
    _qos_args(x)
    x = exp.add_parser("qos", help="change an export's limits live")
    x.add_argument("id", type=int)
    _qos_args(x)
    x = exp.add_parser("delete")
    x.add_argument("id", type=int)
    x = exp.add_parser("attach", help="how a VM attaches it: libvirt XML or QEMU arguments")
    x.add_argument("export", help="export id, or a volume with one export")
    what = x.add_mutually_exclusive_group()
    what.add_argument("--libvirt", dest="show", action="store_const", const="domain",
                      help="a whole <domain> (default; the setup and notes go to stderr)")
    what.add_argument("--disk", dest="show", action="store_const", const="disk",
                      help="only the libvirt <disk> element")
    what.add_argument("--secret", dest="show", action="store_const", const="secret",
                      help="the libvirt <secret> of the host's CHAP (no secret in it)")
    what.add_argument("--qemu", dest="show", action="store_const", const="qemu",
                      help="a qemu-system-x86_64 command line")
    x.add_argument("--host", help="the host of the export's group that attaches it")
    x.add_argument("--accel", choices=["tcg", "kvm"])
    x.add_argument("--vm-name")
    x.add_argument("--memory-mib", type=int)
    return {"host": _host, "host-group": _group, "block-export": _export}


def _host(client, args, out):
    if args.action == "list":
        out(client.list("hosts/"), HOST_COLS)
    elif args.action == "create":
        body = {k: v for k, v in (("name", args.name), ("iqn", args.iqn), ("nqn", args.nqn),
                                  ("address", args.address), ("chap_user", args.chap_user),
                                  ("chap_secret", args.chap_secret)) if v}
        out(client.post("hosts/", body), HOST_COLS)
    elif args.action == "delete":
        client.delete(f"hosts/{args.name}/")


def _group(client, args, out):
    if args.action == "list":
        out(client.list("host-groups/"), GROUP_COLS)
    elif args.action == "create":
        body = {"name": args.name, "hosts": args.hosts}
        if args.mutual_chap_user:
            body.update(mutual_chap_user=args.mutual_chap_user,
                        mutual_chap_secret=args.mutual_chap_secret or "")
        out(client.post("host-groups/", body), GROUP_COLS)
    elif args.action == "set-hosts":
        out(client.patch(f"host-groups/{args.name}/", {"hosts": args.hosts}), GROUP_COLS)
    elif args.action == "delete":
        client.delete(f"host-groups/{args.name}/")


def _export(client, args, out):
    qos = {k: getattr(args, k) for k in QOS if getattr(args, k, None) is not None}
    if args.action == "list":
        params = {"volume": args.volume} if args.volume else {}
        out(client.list("block-exports/", **params), EXPORT_COLS)
    elif args.action == "show":
        out(client.get(f"block-exports/{args.id}/"), EXPORT_COLS + list(QOS))
    elif args.action == "create":
        body = {"volume": args.volume, "protocol": args.protocol, "read_only": args.read_only,
                **qos}
        if args.host_group:
            body["host_group"] = args.host_group
        if args.allow_any:
            body["allow_any"] = True
        made = client.post("block-exports/", body)
        out(made, EXPORT_COLS)
        if made.get("allow_any"):
            print(f"warning: export {made['id']} is open to every initiator that reaches "
                  "the appliance's block address", file=sys.stderr)
    elif args.action == "qos":
        out(client.patch(f"block-exports/{args.id}/", qos), EXPORT_COLS + list(QOS))
    elif args.action == "delete":
        client.delete(f"block-exports/{args.id}/")
    elif args.action == "attach":
        return _attach(client, args)


def _export_id(client, ref: str) -> int:
    """An export id, or the one export of a volume named ``ref``."""
    if ref.isdigit():
        return int(ref)
    found = client.list("block-exports/", volume=ref)
    if len(found) != 1:
        raise ApiError(f"volume {ref} has {len(found)} block exports; give an "
                       "export id (strata block-export list --volume " + ref + ")")
    return found[0]["id"]


def _attach(client, args) -> int:
    params = {k: v for k, v in (("host", args.host), ("accel", args.accel),
                                ("vm_name", args.vm_name), ("memory_mib", args.memory_mib))
              if v is not None}
    r = client.get(f"block-exports/{_export_id(client, args.export)}/attach/", **params)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    show = args.show or "domain"
    if show == "secret":
        if not r["libvirt"]["secret"]:
            raise ApiError("this export needs no CHAP secret")
        print(r["libvirt"]["secret"]["xml"], end="")
        return 0
    print(r["qemu"]["command"] if show == "qemu" else r["libvirt"][show].rstrip("\n"))
    for line in r["setup"]:
        print(f"# setup: {line}", file=sys.stderr)
    for line in r["notes"]:
        print(f"# note: {line}", file=sys.stderr)
    return 0
