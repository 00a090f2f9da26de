"""Where clients mount an NFS export: its entries (one per node serving it) and the mount
command of each.

An export of a file system on a Ceph pool is served by every node assigned the file
service (active-active, one grace database); one on a local pool by its node; on a single
host (`strata up`), by this host. Each entry is ``{node, address, port, state, mount}``
(``address``: the node's floating address when it has one, which keepalived moves to a
survivor when the node dies, else its data address; ``port``: its Ganesha's; ``state``: the node's,
``up`` or ``down``). The recommended entry spreads exports over the nodes that are up
(export id modulo their number), so that clients that take it do not all land on one node;
a client that wants more spreads its own mounts over the entries.
"""
from django.conf import settings

from plumbing.process import probe_address
from services.file import daemons
from services.nodes.public import node_is_up, nodes_serving

MOUNT_OPTIONS = "vers=4.1,nconnect=4"


def mount_command(address: str, port: int, pseudo: str, target: str) -> str:
    """The Linux command that mounts ``pseudo`` of ``address:port`` at ``target`` (NFSv4.1,
    four TCP connections)."""
    host = f"[{address}]" if ":" in address else address
    return f"mount -t nfs -o {MOUNT_OPTIONS},port={port} {host}:{pseudo} {target}"


def export_entries(export) -> dict:
    """``{"entries": [...], "recommended": entry or None, "mount": {"linux": command}}`` of
    an export row (see the module's docstring)."""
    target = "/mnt/" + export.pseudo.strip("/").replace("/", "-")
    nodes = [n for n in nodes_serving(export.filesystem.pool, "file") if not n.local]
    if nodes:
        rows = [(n.name, n.floating_address.split("/")[0] or n.data_address,
                 int(n.options.get("nfs_port") or daemons.DEFAULT_NFS_PORT),
                 "up" if node_is_up(n.name) else "down") for n in nodes]
    else:       # a single host: this one
        nfs = daemons.nfs_settings(settings.DATA_DIR, getattr(settings, "SERVICE_OPTIONS",
                                                                 None) or {})
        rows = [(settings.STRATA_NODE_NAME, probe_address(nfs.bind_address), nfs.port, "up")]
    entries = [{"node": node, "address": address, "port": port, "state": state,
                "mount": mount_command(address, port, export.pseudo, target)}
               for node, address, port, state in rows]
    up = [e for e in entries if e["state"] == "up"]
    best = up[(export.pk or 0) % len(up)] if up else None
    return {"entries": entries, "recommended": best,
            "mount": {"linux": best["mount"] if best else ""}}
