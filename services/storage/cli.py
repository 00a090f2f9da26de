"""`strata pool`, `strata fs`, `strata volume` and `strata snapshot`: the storage core's CLI.

No Django here (a thin REST client, see console/cli/main.py)::

    strata pool create p1 --device image:4G --device /dev/sdb@rack2 --redundancy mirror
    strata fs create ckpt --pool p1 --quota 100G
    strata volume create vm1 20G
    strata snapshot create nightly --filesystem ckpt
    strata fs key create ckpt gpu-hosts --read-only     # native CephFS key (ceph pools)
    strata ceph dev-cluster up /var/lib/strata-ceph     # a development Ceph cluster
"""
from plane.cli.jobs import JOB_COLS, parse_size, watch_job

POOL_COLS = ["name", "driver", "redundancy", "media", "state", "size_bytes", "used_bytes"]
FS_COLS = ["name", "pool", "quota_bytes", "used_bytes", "state", "path"]
VOL_COLS = ["name", "pool", "size_bytes", "used_bytes", "state", "path"]
SNAP_COLS = ["id", "name", "filesystem", "volume", "state", "created_at"]
KEY_COLS = ["name", "entity", "read_only", "path", "created_at"]


def _device(text: str) -> dict:
    path, _, domain = text.partition("@")
    return {"path": path, "fault_domain": domain or "default"}


ACCESS_COLS = ["owner", "group", "mode"]


def _access_args(parser) -> None:
    parser.add_argument("--owner", help="user (name or uid) who owns the root")
    parser.add_argument("--group", help="group (name or gid) of the root")
    parser.add_argument("--mode", help="permission bits of the root, octal (e.g. 0770)")


def _access(args) -> dict:
    return {k: getattr(args, k) for k in ACCESS_COLS if getattr(args, k) is not None}


def register(subparsers) -> dict:
    """Add the subcommands; return {command: handler}."""
    pool = subparsers.add_parser("pool").add_subparsers(dest="action", required=True)
    pool.add_parser("list")
    x = pool.add_parser("show"); x.add_argument("name")
    x = pool.add_parser("create"); x.add_argument("name")
    x.add_argument("--device", action="append", default=[], dest="devices",
                   help="PATH or image:SIZE, optionally PATH@FAULT_DOMAIN; repeat")
    x.add_argument("--redundancy", help="none (default), mirror, mirror3, raid10; ceph pools: "
                   "replicated:N (default replicated:3) or ec:K+M")
    x.add_argument("--media", default="flash", choices=["flash", "capacity"])
    x.add_argument("--driver", choices=["local", "directory", "spdk", "ceph"])
    x.add_argument("--ceph-conf", help="ceph pools: the cluster's ceph.conf")
    x.add_argument("--client", help="ceph pools: cephx client name (client.NAME)")
    x.add_argument("--keyring", help="ceph pools: keyring path, if ceph.conf names none")
    x.add_argument("--failure-domain", choices=["osd", "host", "rack"],
                   help="ceph pools: spread copies over these CRUSH buckets (default host)")
    x.add_argument("--min-size", type=int, help="ceph pools: copies needed to accept writes")
    x = pool.add_parser("delete"); x.add_argument("name")
    x = pool.add_parser("scrub"); x.add_argument("name")
    x.add_argument("--no-wait", action="store_true")

    fs = subparsers.add_parser("fs", aliases=["filesystem"]).add_subparsers(dest="action", required=True)
    fs.add_parser("list")
    x = fs.add_parser("show"); x.add_argument("name")
    x = fs.add_parser("create"); x.add_argument("name"); x.add_argument("--pool")
    x.add_argument("--quota", type=parse_size)
    _access_args(x)
    x = fs.add_parser("set-quota"); x.add_argument("name")
    x.add_argument("quota", help="size, or 'none'")
    x = fs.add_parser("set-access", help="owner, group and mode of the root")
    x.add_argument("name")
    _access_args(x)
    x = fs.add_parser("delete"); x.add_argument("name")
    key = fs.add_parser("key", help="native CephFS keys of a file system on a ceph pool "
                        "(kernel client, ceph-fuse)").add_subparsers(dest="key_action",
                                                                     required=True)
    x = key.add_parser("list"); x.add_argument("filesystem")
    x = key.add_parser("create", help="a key limited to the file system; prints its secret "
                       "once and the mount commands")
    x.add_argument("filesystem"); x.add_argument("name")
    x.add_argument("--read-only", action="store_true", help="a key that cannot write")
    x = key.add_parser("revoke", help="remove the key from Ceph; clients using it are evicted")
    x.add_argument("filesystem"); x.add_argument("name")

    vol = subparsers.add_parser("volume").add_subparsers(dest="action", required=True)
    vol.add_parser("list")
    x = vol.add_parser("show"); x.add_argument("name")
    x = vol.add_parser("create"); x.add_argument("name"); x.add_argument("size", type=parse_size)
    x.add_argument("--pool")
    x = vol.add_parser("resize"); x.add_argument("name"); x.add_argument("size", type=parse_size)
    x = vol.add_parser("delete"); x.add_argument("name")

    snap = subparsers.add_parser("snapshot").add_subparsers(dest="action", required=True)
    x = snap.add_parser("list"); x.add_argument("--filesystem"); x.add_argument("--volume")
    x = snap.add_parser("create"); x.add_argument("name")
    g = x.add_mutually_exclusive_group(required=True)
    g.add_argument("--filesystem"); g.add_argument("--volume")
    x = snap.add_parser("delete"); x.add_argument("id", type=int)
    x = snap.add_parser("clone"); x.add_argument("id", type=int); x.add_argument("name")

    ceph = subparsers.add_parser("ceph", help="Ceph on this machine").add_subparsers(
        dest="what", required=True)
    x = ceph.add_parser("dev-cluster", help="a development Ceph cluster on 127.0.0.1 (mon, "
                        "mgr, 3 OSDs each under its own CRUSH host, 2 MDS); needs root")
    x.add_argument("action", choices=["up", "down", "status", "destroy"])
    x.add_argument("dir", help="the cluster's directory (ceph.conf, keyring, data, logs)")
    return {"pool": run, "fs": run, "filesystem": run, "volume": run, "snapshot": run,
            "ceph": dev_cluster}


def dev_cluster(_client, args, _out) -> int:
    """`strata ceph dev-cluster up|down|status|destroy DIR`: runs on this machine, not
    through the appliance (see dataplane.ceph.devcluster)."""
    # loaded only for this command: the rest of the CLI stays light
    from dataplane.ceph.devcluster import main as dev_cluster_main

    return dev_cluster_main([args.action, args.dir])


dev_cluster.local = True   # console/cli/main.py: no appliance credentials needed


def run(c, args, out) -> int:
    if args.cmd == "pool":
        if args.action == "list":
            out(c.list("pools/"), POOL_COLS)
        elif args.action == "show":
            out(c.get(f"pools/{args.name}/"), POOL_COLS + ["devices", "error"])
        elif args.action == "create":
            body = {"name": args.name, "devices": [_device(d) for d in args.devices],
                    "media": args.media}
            for key, value in (("redundancy", args.redundancy), ("driver", args.driver),
                               ("ceph_conf", args.ceph_conf), ("ceph_client", args.client),
                               ("ceph_keyring", args.keyring),
                               ("failure_domain", args.failure_domain),
                               ("min_size", args.min_size)):
                if value is not None:
                    body[key] = value
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
            body = {"name": args.name, "quota_bytes": args.quota, **_access(args)}
            if args.pool:
                body["pool"] = args.pool
            out(c.post("filesystems/", body), FS_COLS)
        elif args.action == "set-access":
            out(c.patch(f"filesystems/{args.name}/", _access(args)), FS_COLS + ACCESS_COLS)
        elif args.action == "set-quota":
            quota = None if args.quota.lower() == "none" else parse_size(args.quota)
            out(c.patch(f"filesystems/{args.name}/", {"quota_bytes": quota}), FS_COLS)
        elif args.action == "delete":
            c.delete(f"filesystems/{args.name}/")
        elif args.action == "key":
            return _key(c, args, out)
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
    return 0


def _key(c, args, out) -> int:
    """`strata fs key list|create|revoke`."""
    where = f"filesystems/{args.filesystem}/ceph-keys/"
    if args.key_action == "list":
        out(c.get(where), KEY_COLS)
    elif args.key_action == "create":
        made = c.post(where, {"name": args.name, "read_only": args.read_only})
        if args.json:
            out(made, KEY_COLS)
            return 0
        mount = made["mount"]
        print(f"key {made['entity']} ({'read-only' if made['read_only'] else 'read-write'}) "
              f"for {made['path']}")
        print(f"secret (shown once, not kept by Strata): {made['secret']}")
        print(f"\nkernel client: write the secret alone into {mount['secretfile']['path']} "
              f"(0600), then\n  {mount['kernel']}")
        print(f"ceph-fuse: write {mount['keyring']['path']} (0600):\n"
              + mount["keyring"]["content"].replace("<SECRET>", made["secret"])
              + f"then\n  {mount['fuse']}")
    elif args.key_action == "revoke":
        c.delete(f"{where}{args.name}/")
    return 0
