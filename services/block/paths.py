"""NVMe-oF exports of Ceph volumes served by several nodes of the cluster (multipath, ANA).

A volume of a Ceph pool can be served by any node that reaches the cluster. When nodes of the
cluster run the block service with SPDK's nvmf_tgt (:func:`services.nodes.public.serving_nodes`),
an ``nvmf`` export of such a volume gets a *path* on each of up to :data:`MAX_PATHS` of them:
the subsystem (one NQN, serial and namespace UUID on every node) on the node's block address
and NVMe-oF port, one path ``optimized``, the others ``non_optimized``. The paths are kept in
the export's ``connection`` (``paths``: node, traddr, trsvcid, ana_state, target_index, and
what the node reports: ``client``, its librbd client's address, ``serving``, the ANA state
its listener serves, "" before it does, and ``error``); the
top-level ``traddr``/``trsvcid`` are the optimized path's.

Who does what:

- the plane records the paths (:func:`plan`), and moves ANA states (:func:`fail_over`);
- the nodes follow the placement revision (``services.nodes.placement``): the export's
  row saved or deleted, or a failover (which bumps it: the paths are an outcome field), and
  every node's agent runs the block reconcile, which on a node with a path serves it through
  its own nvmf_tgt (:func:`apply_here`, ``dataplane.spdk.rbd``) and records on the path the
  address of the librbd client that opened the image there (the one new watcher of the
  image; else the one watcher no other path claims);
- when the periodic task writes a node down (15 s without a heartbeat), :func:`fail_over`
  first fences that node's Ceph client (``ceph osd blocklist add`` of the recorded address:
  the OSDs drop its watch and refuse its I/O, so the survivor breaks its exclusive lock at
  once instead of waiting ~30 s for the watch to time out), then marks the dead node's paths
  ``inaccessible`` and makes a surviving path ``optimized``; the survivor's next heartbeat
  carries the new revision and its reconcile sets the listener's ANA state.

Blocklisting is safe only once the node is known dead: a live client blocklisted is cut off
the image (its I/O fails, its bdev is useless until re-opened), while a dead one's lock would
otherwise hold every writer back. The plane decides "dead" from missing heartbeats, so a node
that is only cut off from the plane (its nvmf_tgt still serving) is fenced too: that is the
point of fencing, its late writes are refused by the OSDs instead of landing after the
survivor's. A node that comes back registers again by its heartbeats (:func:`heal`); its paths
come back ``non_optimized`` with the client address cleared (its nvmf_tgt, started again by
the agent, opens the image with a new client); the old client stays blocklisted until the
entry expires (:data:`BLOCKLIST_EXPIRE`), which harms nothing since that process is gone.
"""
from __future__ import annotations

import logging

from django.db import transaction

from dataplane.ceph.rbd import blocklist, image_watchers, parse_rbd_path
from dataplane.spdk.nvmf import NQN_BASE
from plumbing.process import data_address, probe_address
from services.block import up
from services.block.models import BlockExport
from services.nodes.public import bump, node_is_up, serving_nodes
from services.storage import service as storage

log = logging.getLogger(__name__)

MAX_PATHS = 2
DAEMON = "nvmf_tgt"
BLOCKLIST_EXPIRE = 3600.0     # seconds: Ceph's own default; the fenced process is gone


def is_multipath(export: BlockExport) -> bool:
    return bool((export.connection or {}).get("paths"))


def path_of(export: BlockExport, node: str) -> dict | None:
    return next((p for p in (export.connection or {}).get("paths", []) if p["node"] == node),
                None)


def wanted(volume) -> list:
    """The nodes that would serve an nvmf export of ``volume`` (none: serve it from this
    host's own nvmf_tgt, as on a single host)."""
    if volume.pool.driver != "ceph":
        return []
    return serving_nodes("block", DAEMON)


def _address(node) -> tuple:
    options = {"host": node.management_address, "data_host": node.data_address,
               **node.options}
    return (probe_address(data_address(options, "block_host")),
            str(int(options.get("nvmf_port") or up.DEFAULT_NVMF_PORT)))


def connection(nqn: str, paths: list, removed=()) -> dict:
    """An export's connection info: the subsystem, every path, the optimized one on top, and
    the paths a drain removed (``removed``: [{node, reason}], when there are any)."""
    best = next((p for p in paths if p["ana_state"] == "optimized"), paths[0])
    info = {"protocol": "nvmf", "subsystem_nqn": nqn, "trtype": "tcp", "nsid": 1,
            "traddr": best["traddr"], "trsvcid": best["trsvcid"], "read_only": False,
            "paths": paths}
    if removed:
        info["removed"] = list(removed)
    return info


def _reconnect(row: BlockExport, paths: list) -> dict:
    """``row``'s connection info with ``paths``."""
    return connection(row.connection["subsystem_nqn"], paths, row.connection.get("removed", ()))


def plan(volume, nodes: list) -> dict:
    """The connection of a new export of ``volume`` on up to MAX_PATHS of ``nodes``: the node
    with the fewest optimized paths gets this one optimized."""
    load = _optimized_paths()
    nodes = sorted(nodes, key=lambda n: (load.get(n.name, 0), n.name))[:MAX_PATHS]
    spec = parse_rbd_path(volume.path)
    paths = [_new_path(node, "optimized" if i == 0 else "non_optimized", i)
             for i, node in enumerate(nodes)]
    return connection(f"{NQN_BASE}:rbd.{spec['pool']}.{spec['image']}", paths)


def _optimized_paths() -> dict:
    """{node name: how many optimized paths it serves}."""
    load = {}
    for e in BlockExport.objects.filter(protocol=BlockExport.Protocol.NVMF):
        for p in (e.connection or {}).get("paths", []):
            load[p["node"]] = load.get(p["node"], 0) + (p["ana_state"] == "optimized")
    return load


def _new_path(node, ana_state: str, target_index: int) -> dict:
    traddr, trsvcid = _address(node)
    return {"node": node.name, "traddr": traddr, "trsvcid": trsvcid, "ana_state": ana_state,
            "target_index": target_index, "client": "", "serving": "", "error": ""}


# -- what a node serves ---------------------------------------------------------------------

def heal(name: str) -> list:
    """Node ``name`` heartbeats again after it was written down: its paths left
    ``inaccessible`` by a failover come back as non-optimized ones, their client cleared (to
    be learned again from its nvmf_tgt, started anew by its agent), and the nodes reconcile.
    Returns the export ids."""
    healed = []
    for e in BlockExport.objects.filter(protocol=BlockExport.Protocol.NVMF):
        if (path_of(e, name) or {}).get("ana_state") != "inaccessible":
            continue
        with transaction.atomic():
            row = BlockExport.objects.select_for_update().get(pk=e.pk)
            p = path_of(row, name)
            if p is None or p["ana_state"] != "inaccessible":
                continue
            p.update(ana_state="non_optimized", client="", serving="", fenced=False)
            row.connection = _reconnect(row, row.connection["paths"])
            row.save(update_fields=["connection", "updated_at"])
        healed.append(e.export_id)
        log.info("block: node %s is back: its path of %s is non-optimized", name, e.export_id)
    if healed:
        bump()
    return healed


def apply_here(rt, export: BlockExport, node: str, host_group, qos=None) -> dict:
    """Serve this node's path of a multipath export through its nvmf_tgt (the group's hosts
    and DH-HMAC-CHAP keys, the export's QoS limits ``qos`` on this node's rbd bdev), and
    record on the path what happened (``serving``/``error``, and the librbd client's
    address)."""
    path = path_of(export, node)
    volume_path = storage.volume_path(export.volume)      # with this node's ceph.conf
    before = None
    try:
        if export.export_id not in rt.nvmf.list_exports():
            before = set(image_watchers(volume_path))
        rt.nvmf.export_path(export.export_id, volume_path, host_group=host_group,
                            ana_state=path["ana_state"], target_index=path["target_index"],
                            qos=qos)
        after = set(image_watchers(volume_path))
        client = _own_client(export, node, path, before, after)
        outcome = {"serving": path["ana_state"], "error": "", "client": client}
    except Exception as exc:     # recorded on the path, the reconcile goes on with the others
        log.error("block: %s: path on node %s: %s", export.export_id, node, exc)
        outcome = {"serving": "", "error": str(exc)}
    with transaction.atomic():
        row = BlockExport.objects.select_for_update().get(pk=export.pk)
        p = path_of(row, node)
        if p is not None and p["ana_state"] == path["ana_state"]:
            p.update(outcome)
            row.connection = _reconnect(row, row.connection["paths"])
            serving = [q for q in row.connection["paths"] if q.get("serving")]
            row.state = BlockExport.State.ONLINE if serving else BlockExport.State.ERROR
            row.error = "" if serving else "; ".join(
                f"{q['node']}: {q.get('error') or 'not served yet'}"
                for q in row.connection["paths"])
            row.save(update_fields=["connection", "state", "error", "updated_at"])
    return outcome


def _own_client(export, node: str, path: dict, before, after: set) -> str:
    """This node's librbd client of the image: the one watcher that appeared when it opened
    the image; else the recorded one while it still watches; else the one watcher no other
    path of the image claims; else "" (not known: a failover then waits for the watch)."""
    if before is not None and len(after - before) == 1:
        return next(iter(after - before))
    if path.get("client") in after:
        return path["client"]
    others = {p.get("client") for e in BlockExport.objects.filter(volume=export.volume)
              for p in (e.connection or {}).get("paths", []) if p["node"] != node}
    left = after - others
    return next(iter(left)) if len(left) == 1 else ""


# -- failover -------------------------------------------------------------------------------

def fail_over(names: list) -> list:
    """Nodes ``names`` were written down: fence their Ceph clients on every export they
    have a path of, mark those paths inaccessible and make a live path optimized. Returns
    [(export_id, the new optimized node or None)]."""
    moved = []
    for e in BlockExport.objects.filter(protocol=BlockExport.Protocol.NVMF).select_related(
            "volume"):
        if not any(path_of(e, n) for n in names):
            continue
        with transaction.atomic():
            row = BlockExport.objects.select_for_update().select_related("volume").get(
                pk=e.pk)
            paths = row.connection["paths"]
            dead = [p for p in paths if p["node"] in names or not node_is_up(p["node"])]
            live = [p for p in paths if p not in dead]
            fence = [p["client"] for p in dead if p.get("client") and not p.get("fenced")]
            if fence:
                try:
                    blocklist(row.volume.path, fence, expire=BLOCKLIST_EXPIRE)
                    log.warning("block: %s: fenced the Ceph client(s) %s of dead node(s) %s",
                                row.export_id, ", ".join(fence),
                                ", ".join(p["node"] for p in dead))
                except Exception as exc:   # still move the path: the survivor waits longer
                    log.error("block: %s: could not blocklist %s: %s", row.export_id,
                              ", ".join(fence), exc)
                    row.error = f"fencing {', '.join(fence)} failed: {exc}"
            for p in dead:
                p["fenced"] = p.get("fenced") or p.get("client") in fence
                p["ana_state"] = "inaccessible"
            best = None
            if live and not any(p["ana_state"] == "optimized" for p in live):
                best = live[0]
                best["ana_state"] = "optimized"
            row.connection = _reconnect(row, paths)
            row.save(update_fields=["connection", "error", "updated_at"])
        moved.append((row.export_id, best["node"] if best else None))
        log.warning("block: %s: node(s) %s down; optimized path now on %s", row.export_id,
                    ", ".join(names), best["node"] if best else "(unchanged)")
    if moved:
        bump()       # the paths are an outcome field: the placement's receivers skip them
    return moved


# -- drain ----------------------------------------------------------------------------------

def move_off(name: str) -> list:
    """Node ``name`` was drained (it stops its block daemons): each of its paths moves to a
    node serving the block service with nvmf_tgt that has no path of that export yet (the
    one with the fewest optimized paths), with the same controller-ID range. When the
    drained path was the optimized one, a surviving path becomes optimized (the hosts are
    connected to it already; they connect the new path when told) and the new one is
    non-optimized. With no node to take it, the path is removed and the connection's
    ``removed`` says why; an export left without any path keeps it ``inaccessible`` and
    goes to ``error``. Returns [(export_id, the node the path went to, or None)]."""
    moved = []
    for e in BlockExport.objects.filter(protocol=BlockExport.Protocol.NVMF):
        if not path_of(e, name):
            continue
        with transaction.atomic():
            row = BlockExport.objects.select_for_update().get(pk=e.pk)
            old = path_of(row, name)
            if old is None:
                continue
            rest = [p for p in row.connection["paths"] if p is not old]
            taken = {p["node"] for p in rest} | {name}
            load = _optimized_paths()
            spare = sorted((n for n in serving_nodes("block", DAEMON) if n.name not in taken),
                           key=lambda n: (load.get(n.name, 0), n.name))
            alive = [p for p in rest if p["ana_state"] != "inaccessible"]
            if old["ana_state"] == "optimized" and alive:
                alive[0]["ana_state"] = "optimized"
            has_optimized = any(p["ana_state"] == "optimized" for p in rest)
            removed = [r for r in row.connection.get("removed", []) if r["node"] != name]
            if spare:
                new = _new_path(spare[0], "non_optimized" if has_optimized else "optimized",
                                old["target_index"])
                paths = [new if p is old else p for p in row.connection["paths"]]
            else:
                reason = (f"node {name} was drained and no other node runs the block service "
                          "with nvmf_tgt to take its path")
                removed.append({"node": name, "reason": reason})
                paths = rest or [{**old, "ana_state": "inaccessible", "serving": "",
                                  "error": reason}]
                if not rest:
                    row.state, row.error = BlockExport.State.ERROR, reason
            row.connection = connection(row.connection["subsystem_nqn"], paths, removed)
            row.save(update_fields=["connection", "state", "error", "updated_at"])
        moved.append((row.export_id, spare[0].name if spare else None))
        log.warning("block: %s: node %s drained; its path %s", row.export_id, name,
                    f"moved to {spare[0].name}" if spare else "removed (no node to take it)")
    if moved:
        bump()
    return moved
