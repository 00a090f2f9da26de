"""Make the block daemons match the rows, and record what they report back on them.

Every change goes through here. A request's row change and its daemon change happen inside
one database transaction: a daemon error rolls the row back and answers with the daemon's
message (400/404/409/503 by the error's ``code``). Work that has no request to answer
(the bootstrap's reconcile, a volume grown under its exports) records errors on the export
rows (``state="error"``, ``error=<message>``) and in the log.

The daemons run under `strata up`; every call here uses a short
``BlockRuntime.session()`` that adopts them (web and worker are separate processes).
"""
from __future__ import annotations

import contextlib
import logging
import os

from django.conf import settings
from django.db import transaction

from plumbing.errors import Conflict, Invalid, StrataError
from plumbing.packages import not_installed
from services.block import attach, paths, up
from services.block.models import BlockExport, Host, HostGroup
from services.block.transports import BlockRuntime, ExportNotFound, QosLimits, TransportError
from services.block.transports import Host as RtHost
from services.block.transports import HostGroup as RtHostGroup
from services.nodes.public import served_here
from services.storage import service as storage
from services.storage.drivers import driver_for
from services.storage.models import Volume

log = logging.getLogger(__name__)

@contextlib.contextmanager
def runtime(spdk: bool = False):
    """A BlockRuntime session on the daemons `strata up` started (its errors are domain
    errors: a refused export is Invalid/NotFound/Conflict, a failed daemon Unavailable).

    ``spdk=True`` adds the NVMe-oF transport (needs spdk_tgt at STRATA_SPDK_SOCKET).
    """
    kw = up.runtime_kwargs(settings.DATA_DIR, settings.SERVICE_OPTIONS)
    if spdk:
        kw["spdk_driver"] = driver_for("spdk")
    with BlockRuntime.session(**kw) as rt:
        yield rt


def uses_spdk(exports) -> bool:
    return any(e.protocol == BlockExport.Protocol.NVMF and not paths.is_multipath(e)
               for e in exports)


def local_exports(exports) -> list:
    """The exports this host's own daemons serve (not those served by nodes' paths)."""
    return [e for e in exports if not paths.is_multipath(e)]


def group_spec(hg: HostGroup | None) -> RtHostGroup | None:
    """The runtime's plain HostGroup for a host group row (None = open to any initiator)."""
    if hg is None:
        return None
    return RtHostGroup(
        name=hg.name,
        hosts=[RtHost(h.name, iqn=h.iqn or None, nqn=h.nqn or None, address=h.address or None,
                      chap_user=h.chap_user or None, chap_secret=h.chap_secret or None,
                      dhchap_key=h.dhchap_key or None)
               for h in hg.hosts.all()],
        mutual_chap_user=hg.mutual_chap_user or None,
        mutual_chap_secret=hg.mutual_chap_secret or None)


def qos_of(export: BlockExport) -> QosLimits | None:
    return QosLimits(**export.qos()) if export.has_qos() else None


def _export_into(rt: BlockRuntime, export: BlockExport) -> dict:
    return rt.export(export.export_id, export.protocol, storage.volume_path(export.volume),
                     read_only=export.read_only, host_group=group_spec(export.host_group),
                     qos=qos_of(export))


def _set_online(export: BlockExport, info: dict) -> None:
    export.connection, export.state, export.error = info, BlockExport.State.ONLINE, ""


# -- exports -------------------------------------------------------------------------------

def plane_only() -> bool:
    """`strata plane`: the cluster's nodes run the block daemons, the plane runs none; a
    change is recorded and the nodes apply it (services.nodes.placement's revision)."""
    return bool((settings.SERVICE_OPTIONS or {}).get("plane_only"))


def create_export(*, volume: Volume, protocol: str, host_group: HostGroup | None = None,
                  read_only: bool = False, allow_any: bool = False, **qos) -> BlockExport:
    """Record the export and make it live; answers the daemon's error if it cannot be. On a
    plane without block daemons it is recorded ``pending`` for the nodes to apply. An nvmf
    export of a Ceph volume, while nodes run nvmf_tgt, gets a path on two of them
    (``services.block.paths``), ``pending`` until a node serves its path."""
    nodes = paths.wanted(volume) if protocol == BlockExport.Protocol.NVMF else []
    with transaction.atomic():
        export = BlockExport.objects.create(volume=volume, protocol=protocol,
                                            host_group=host_group, read_only=read_only,
                                            allow_any=allow_any, **qos)
        if nodes:    # the nodes' agents serve their paths (services.nodes.placement)
            _set_online(export, paths.plan(volume, nodes))
            export.state = BlockExport.State.PENDING
            export.save()
            return export
        if plane_only():
            export.state = BlockExport.State.PENDING
            export.save(update_fields=["state"])
            return export
        with runtime(spdk=protocol == "nvmf") as rt:
            _set_online(export, _export_into(rt, export))
        export.save()
    return export


def update_export(export: BlockExport, changes: dict) -> BlockExport:
    """QoS changes apply live; a new host group or read-only flag re-exports the volume."""
    old_group, old_ro = export.host_group_id, export.read_only
    if paths.is_multipath(export):     # the nodes follow the row (placement revision)
        with transaction.atomic():
            for key, value in changes.items():
                setattr(export, key, value)
            export.save()
        return export
    with transaction.atomic():
        for key, value in changes.items():
            setattr(export, key, value)
        if plane_only():             # the nodes apply it
            export.save()
            return export
        with runtime(spdk=export.protocol == "nvmf") as rt:
            if (export.host_group_id, export.read_only) != (old_group, old_ro):
                try:
                    rt.unexport(export.export_id)
                except ExportNotFound:
                    pass
                _set_online(export, _export_into(rt, export))
            elif any(k in BlockExport.QOS_FIELDS for k in changes):
                rt.set_qos(export.export_id, qos_of(export))
                _set_online(export, rt.connection_info(export.export_id))
        export.save()
    return export


def delete_export(export: BlockExport) -> None:
    """Remove the export (connected clients are disconnected) and its row."""
    export_id = export.export_id           # delete() clears the primary key
    if paths.is_multipath(export):         # the nodes let go of it at their next reconcile
        export.delete()
        return
    with transaction.atomic():
        export.delete()
        if plane_only():             # the nodes drop it (no row asks for it any more)
            return
        with runtime(spdk=export.protocol == "nvmf") as rt:
            try:
                rt.unexport(export_id)
            except ExportNotFound:
                pass           # already gone from the daemons: the row was all that was left


# -- hosts and host groups -----------------------------------------------------------------

def apply_host_groups(groups) -> None:
    """Push the groups' current hosts/CHAP to their targets and NVMe-oF subsystems."""
    groups = [g for g in groups if g.exports.exists()]
    if not groups or plane_only():   # on a plane alone: the nodes apply them
        return
    exports = [e for g in groups for e in g.exports.all()]
    with runtime(spdk=uses_spdk(exports)) as rt:
        for g in groups:
            spec = group_spec(g)
            rt.set_host_group(spec)
            for e in local_exports(g.exports.filter(protocol=BlockExport.Protocol.NVMF)):
                rt.nvmf.set_hosts(e.export_id, spec)


def save_host(host: Host, data: dict) -> Host:
    """Create or change a host; its groups' ACLs and CHAP accounts follow at once."""
    with transaction.atomic():
        for key, value in data.items():
            setattr(host, key, value)
        host.save()
        apply_host_groups(list(host.groups.all()))
    return host


def delete_host(host: Host) -> None:
    with transaction.atomic():
        groups = list(host.groups.all())
        host.delete()
        apply_host_groups(groups)


def save_host_group(group: HostGroup, data: dict) -> HostGroup:
    """Create or change a host group (``hosts`` is a list of Host rows)."""
    hosts = data.pop("hosts", None)
    with transaction.atomic():
        for key, value in data.items():
            setattr(group, key, value)
        group.save()
        if hosts is not None:
            group.hosts.set(hosts)
        apply_host_groups([group])
    return group


def delete_host_group(group: HostGroup) -> None:
    users = [f"{e.export_id} ({e.protocol} of volume {e.volume.name})"
             for e in group.exports.select_related("volume")]
    if users:
        raise Conflict(f"Host group {group.name} still has block exports: {', '.join(users)}; "
                       "delete them or move them to another group first.")
    with transaction.atomic():
        group.delete()
        # tgtd knows a group only through its exports: nothing to tell on a plane alone (the
        # nodes apply it) or a host without tgt (a group of NBD/NVMe-oF exports only)
        if plane_only() or not_installed("tgtd", "tgtadm"):
            return
        with runtime() as rt:
            rt.iscsi.remove_host_group(group.name)


# -- integrity with the storage service ---------------------------------------------------

def refuse_volume_delete(volume: Volume) -> None:
    """Conflict (409) while the volume has block exports."""
    exports = [f"{e.export_id} ({e.protocol})" for e in volume.block_exports.all()]
    if exports:
        raise Conflict(f"Volume {volume.name} is exported over block protocols: "
                       f"{', '.join(exports)}; delete its block exports first.")


def refuse_volume_move(volume: Volume, pool) -> None:
    """Conflict (409) while the volume has exports that cannot follow a tier move: NVMe-oF
    namespaces are SPDK bdevs, not files (iSCSI, NBD and vhost-user-blk exports follow)."""
    exports = [f"{e.export_id} ({e.protocol})" for e in volume.block_exports.all()
               if e.protocol == BlockExport.Protocol.NVMF]
    if exports:
        raise Conflict(f"Volume {volume.name} is exported over NVMe-oF: {', '.join(exports)}; "
                       f"those exports cannot follow a move to pool {pool.name}: delete them "
                       "first.")


class FollowFailed(Exception):
    """An export of a moved volume could not be served from its new path."""


def written_after(old_path: str, new_path: str) -> bool:
    """True when the old copy was modified after the new one was made from it.

    The new copy keeps the mtime of the snapshot it was made from (btrfs snapshot and
    send/receive keep it); the daemons write without touching it otherwise, so a later
    mtime on the old file means a write reached it after the move's last copy round.
    Best effort: two writes in one clock tick leave one mtime (the move's full-hash check
    of the old copy, after the switch, still catches those and keeps the old copy).
    """
    try:
        return os.stat(old_path).st_mtime_ns > os.stat(new_path).st_mtime_ns
    except FileNotFoundError:
        return False


def follow_volume(volume: Volume, old_path: str, undo: bool = False) -> None:
    """``volume`` now lives at ``volume.path`` (a tier move): serve each of its exports from
    there under the same connection info (iSCSI target IQN and LUN, ACLs and CHAP; NBD
    export name; vhost-user socket), and let go of ``old_path``.

    What clients see: iSCSI, a command sent during the swap (the target is offline for tens
    of milliseconds) is retried by the initiator, after a new login if it dropped the
    session; NBD and vhost-user-blk clients keep their connection, their requests wait for
    the swap. Nobody sees another path, name or LUN. Raises FollowFailed when an export could
    not follow (that export keeps serving the old copy); the move then points the volume
    back and calls this again (``undo``), which re-points the exports that did follow.

    Once every export serves the new copy, the old one is checked: if a client wrote to it
    after the move's last copy round (a writer during the switch), FollowFailed too, so the
    move is undone and those writes stay served instead of being lost with the old copy.
    """
    exports = list(volume.block_exports.all())
    if not exports:
        return
    done = []
    try:
        with runtime() as rt:
            for e in exports:
                try:
                    _set_online(e, rt.repoint(e.export_id, volume.path))
                except ExportNotFound:       # not in the daemons' record: export it anew
                    _set_online(e, _export_into(rt, e))
                done.append(e)
    except (TransportError, StrataError) as exc:
        failed = next((e for e in exports if e not in done), None)
        what = f"{failed.export_id} ({failed.protocol})" if failed else "its exports"
        raise FollowFailed(f"block export {what} of volume {volume.name} could not follow it "
                           f"to {volume.path}: {exc}") from exc
    finally:
        for e in done:
            e.save(update_fields=["connection", "state", "error", "updated_at"])
    if not undo and written_after(old_path, volume.path):
        raise FollowFailed(f"volume {volume.name} was written through its exports during the "
                           "switch, after the last copy round; the move is undone so those "
                           "writes stay: pause the writers and move it again")
    log.info("block: %d export(s) of volume %s now serve %s (was %s)", len(done),
             volume.name, volume.path, old_path)


def volume_resized(volume: Volume) -> dict:
    """Grow every export of a grown volume (LUNs re-read their size; no re-export).

    Never raises: a failure is recorded on the export rows and in the log.
    """
    exports = local_exports(volume.block_exports.all())
    if not exports:        # the rbd bdevs of the nodes' paths follow the image by themselves
        return {}
    try:
        with runtime(spdk=uses_spdk(exports)) as rt:
            sizes = rt.volume_resized(volume.path)
            for e in exports:
                _set_online(e, rt.connection_info(e.export_id))
    except (TransportError, StrataError) as exc:
        log.error("block: volume %s grew but its exports could not follow: %s", volume.name, exc)
        for e in exports:
            e.state, e.error = BlockExport.State.ERROR, f"resize not applied: {exc}"
            e.save(update_fields=["state", "error", "updated_at"])
        return {}
    for e in exports:
        e.save(update_fields=["connection", "state", "error", "updated_at"])
    return sizes


# -- reconcile (bootstrap) -----------------------------------------------------------------

def reconcile_all() -> dict:
    """Make the daemons serve exactly the recorded exports; record each one's outcome.

    Runtime exports that no row asks for (``exp-*`` left by a crash) are removed. Never
    raises on a single export: errors go on its row. An export served by nodes' paths
    (``services.block.paths``) is served here only when this host is one of those nodes.
    """
    # on a cluster node: the exports of the volumes placed on it (services.nodes.placement),
    # and of the multipath exports those with a path on it
    here = settings.STRATA_NODE_NAME
    exports = [e for e in BlockExport.objects.select_related("volume__pool", "host_group")
               if (paths.path_of(e, here) is not None if paths.is_multipath(e)
                   else served_here(e.volume.pool, "block"))]
    summary = {"online": 0, "error": 0, "removed": []}
    try:
        with runtime(spdk=any(e.protocol == BlockExport.Protocol.NVMF
                              for e in exports)) as rt:
            wanted = {e.export_id for e in exports}
            for eid in sorted({e for t in rt.transports.values() for e in t.list_exports()}):
                if eid.startswith("exp-") and eid not in wanted:
                    rt.unexport(eid)
                    summary["removed"].append(eid)
            for g in HostGroup.objects.filter(exports__isnull=False).distinct():
                rt.set_host_group(group_spec(g))
            for e in exports:
                if paths.is_multipath(e):
                    done = paths.apply_here(rt, e, here, group_spec(e.host_group),
                                            qos_of(e))
                    summary["online" if done["serving"] else "error"] += 1
                else:
                    _reconcile_one(rt, e, summary)
    except (TransportError, StrataError) as exc:
        log.error("block: the daemons could not be reconciled: %s", exc)
        for e in local_exports(exports):
            e.state, e.error = BlockExport.State.ERROR, f"not applied: {exc}"
            e.save(update_fields=["state", "error", "updated_at"])
        summary["error"] = len(exports)
        summary["detail"] = str(exc)
    return summary


def _reconcile_one(rt: BlockRuntime, export: BlockExport, summary: dict) -> None:
    try:
        try:
            info = _export_into(rt, export)
        except TransportError as exc:
            if exc.code != "exists":
                raise
            rt.unexport(export.export_id)          # recorded differently: export anew
            info = _export_into(rt, export)
        _set_online(export, info)
        summary["online"] += 1
    except (TransportError, StrataError) as exc:
        export.state, export.error = BlockExport.State.ERROR, str(exc)
        summary["error"] += 1
        log.error("block: export %s of volume %s: %s", export.export_id, export.volume.name, exc)
    export.save(update_fields=["connection", "state", "error", "updated_at"])


# -- attach recipes -------------------------------------------------------------------------

def attach_recipe(export: BlockExport, host: str | None = None, **options) -> dict:
    """The libvirt and QEMU recipe of ``export`` (see :mod:`services.block.attach`) for
    ``host``, a host of its group (default: the group's first host, with CHAP if one has it).
    """
    client = None
    if export.host_group is not None:
        hosts = list(export.host_group.hosts.all())
        if host:
            found = [h for h in hosts if h.name == host]
            if not found:
                raise Invalid(f"host {host} is not in host group {export.host_group.name} of "
                              f"export {export.export_id}; its hosts: "
                              f"{', '.join(h.name for h in hosts) or 'none'}")
            chosen = found[0]
        else:
            chosen = next((h for h in hosts if h.chap_user), hosts[0] if hosts else None)
        if chosen is not None:
            client = attach.Client(chosen.name, iqn=chosen.iqn, nqn=chosen.nqn,
                                   chap_user=chosen.chap_user, dhchap=bool(chosen.dhchap_key))
    elif host:
        raise Invalid(f"export {export.export_id} has no host group (open to any client): "
                      "leave host out")
    return attach.recipe({"export_id": export.export_id, "protocol": export.protocol,
                          "volume": export.volume.name, "read_only": export.read_only,
                          "connection": export.connection}, client, **options)
