"""NFS-Ganesha config: built as a plain dict (unit-testable), then printed by the renderer.

Dict shape: ``{block name: {key: value, ...}}`` where a value may be a scalar, a list of
scalars (printed comma-separated), a nested dict (a sub-block) or a list of dicts (repeated
blocks, e.g. ``EXPORT`` and ``CLIENT``). The renderer adds no logic of its own.
"""

from __future__ import annotations

import os
import re

from .errors import InvalidShareSpec
from .specs import (
    SNAPSHOT_DIR,
    SNAPSHOT_EXPORT_OFFSET,
    NfsClientRule,
    NfsExport,
    NfsSettings,
    check_text,
)

_ACCESS = {"rw": "RW", "ro": "RO"}
_SQUASH = {"root_squash": "Root_Squash", "all_squash": "All_Squash",
           "no_root_squash": "No_Root_Squash"}
_BARE = re.compile(r"^[A-Za-z0-9_.:/*-]+$")


def build_ganesha_config(settings: NfsSettings, exports: list[NfsExport]) -> dict:
    """Return the Ganesha config for ``settings`` and ``exports`` as a plain dict.

    NFSv4 only (no rpcbind, NLM, RQUOTA or UDP), graceless start with the recovery state in
    ``settings.state_dir``, numeric owners (clients send uids, not names). Every export
    denies by default (``Access_Type = None``) and grants access through one ``CLIENT`` block
    per rule, in order. Raises :class:`InvalidShareSpec` for duplicate ids or pseudo paths.
    """
    ids, pseudos = set(), set()
    blocks = []
    for export in exports:
        if export.export_id in ids:
            raise InvalidShareSpec(f"export id {export.export_id} is used twice")
        if export.pseudo in pseudos:
            raise InvalidShareSpec(f"pseudo path {export.pseudo!r} is used twice")
        ids.add(export.export_id)
        pseudos.add(export.pseudo)
        blocks.append(_export_block(settings, export))
        # FSAL_CEPH walks into CephFS snapshots itself (client_snapdir = .snapshots)
        if export.snapshots and export.ceph is None:
            blocks.append(_export_block(settings, snapshot_export(export)))
    io = settings.max_io_bytes
    confs = {e.ceph.conf for e in exports if e.ceph is not None}
    if len(confs) > 1:
        raise InvalidShareSpec("one NFS server serves file systems of one Ceph cluster: "
                               f"exports name {len(confs)} ({', '.join(sorted(confs))})")
    ceph = {"CEPH": {"Ceph_Conf": ceph_client_conf_path(settings)}} if confs else {}
    return {
        "NFS_CORE_PARAM": {
            "Protocols": [4],
            "NFS_Port": settings.port,
            "Bind_addr": settings.bind_address,
            "Enable_NLM": False,
            "Enable_RQUOTA": False,
            "Enable_UDP": False,
            "RPC_Ioq_ThrdMax": settings.worker_threads,
            "RPC_Max_Connections": settings.max_connections,
            # a full-size WRITE plus its RPC header must fit in one receive buffer
            "MaxRPCRecvBufferSize": io + 64 * 1024,
            "MaxRPCSendBufferSize": io + 64 * 1024,
        },
        "NFSV4": {**_recovery(settings),
                  "Allow_Numeric_Owners": True,
                  "Only_Numeric_Owners": True},
        **_rados_kv(settings),
        "NFS_KRB5": {"Active_krb5": False},
        "EXPORT_DEFAULTS": {"Access_Type": "None", "SecType": ["sys"], "Protocols": [4]},
        # NFSv4.1 clients probe pNFS on every open; VFS has no layouts and Ganesha would log
        # a warning per open (a log write on the data path).
        "LOG": {"COMPONENTS": {"PNFS": "MAJ"}},
        **ceph,
        "EXPORT": blocks,
    }


def _recovery(settings: NfsSettings) -> dict:
    """Alone: graceless, client records in the state folder. One of several (``cluster``):
    the ``rados_cluster`` backend, a grace period when any server starts over, NFSv4.1 and
    later only (its reclaim needs sessions)."""
    if settings.cluster is None:
        return {"Graceless": True, "Lease_Lifetime": settings.lease_seconds,
                "RecoveryBackend": "fs",
                "RecoveryRoot": os.path.join(settings.state_dir, "recovery")}
    return {"Graceless": False, "Lease_Lifetime": settings.lease_seconds,
            "Grace_Period": settings.grace_seconds, "RecoveryBackend": "rados_cluster",
            "Minor_Versions": [1, 2]}


def _rados_kv(settings: NfsSettings) -> dict:
    c = settings.cluster
    if c is None:
        return {}
    return {"RADOS_KV": {"ceph_conf": c.conf, "userid": c.client, "pool": c.pool,
                         "namespace": c.namespace, "nodeid": c.nodeid}}


def ceph_client_conf_path(settings: NfsSettings) -> str:
    """The ceph.conf Ganesha's libcephfs reads: the cluster's, plus what Strata needs of
    the client (see :func:`ceph_client_conf`)."""
    return os.path.join(settings.state_dir, "ceph.conf")


def ceph_client_conf(cluster_conf_text: str) -> str:
    """The cluster's ceph.conf with a ``[client]`` section added (Ceph merges repeated
    sections): snapshots appear as ``.snapshots`` as on every other pool."""
    return (cluster_conf_text.rstrip("\n") + "\n\n# added by Strata for NFS-Ganesha\n"
            "[client]\nclient_snapdir = " + SNAPSHOT_DIR + "\n")


def snapshot_export(export: NfsExport) -> NfsExport:
    """The read-only companion export of ``export``'s ``.snapshots`` directory.

    Ganesha's VFS only crosses into file systems it claimed when an export was created, and
    each btrfs snapshot is its own (bind-mounted) file system; a separate export for the
    snapshot directory can be re-created when snapshots appear without touching the
    writable export its clients are writing through.
    """
    rules = [NfsClientRule(r.address, "ro", r.squash, r.anonymous_uid, r.anonymous_gid)
             for r in export.clients]
    companion = NfsExport(1, os.path.join(export.path, SNAPSHOT_DIR),
                          export.pseudo.rstrip("/") + "/" + SNAPSHOT_DIR, rules, snapshots=False)
    companion.export_id = export.export_id + SNAPSHOT_EXPORT_OFFSET
    return companion


def _export_block(settings: NfsSettings, export: NfsExport) -> dict:
    io = settings.max_io_bytes
    return {
        "Export_Id": export.export_id,
        "Path": export.ceph.path if export.ceph else export.path,
        "Pseudo": export.pseudo,
        "Protocols": [4],
        "Transports": ["TCP"],
        "Access_Type": "None",
        "Squash": "Root_Squash",
        "SecType": ["sys"],
        "MaxRead": io,
        "MaxWrite": io,
        "PrefRead": io,
        "PrefWrite": io,
        "FSAL": ({"Name": "CEPH", "User_Id": export.ceph.client,
                  "Filesystem": export.ceph.filesystem} if export.ceph else {"Name": "VFS"}),
        "CLIENT": [
            {
                "Clients": [rule.address],
                "Protocols": [4],
                "Access_Type": _ACCESS[rule.access],
                "Squash": _SQUASH[rule.squash],
                "Anonymous_Uid": rule.anonymous_uid,
                "Anonymous_Gid": rule.anonymous_gid,
            }
            for rule in export.clients
        ],
    }


def render_ganesha_conf(config: dict) -> str:
    """Print a dict from :func:`build_ganesha_config` in Ganesha's config syntax."""
    lines = ["# Generated by Strata (services.file.runtime.ganesha); do not edit."]
    for name, body in config.items():
        for block in body if isinstance(body, list) else [body]:
            _render_block(name, block, lines, 0)
    return "\n".join(lines) + "\n"


def _render_block(name: str, body: dict, lines: list[str], depth: int) -> None:
    pad = "    " * depth
    lines.append(f"{pad}{name} {{")
    for key, value in body.items():
        if isinstance(value, dict):
            _render_block(key, value, lines, depth + 1)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                _render_block(key, item, lines, depth + 1)
        elif isinstance(value, list) and not value:
            continue
        else:
            lines.append(f"{pad}    {key} = {_value(key, value)};")
    lines.append(f"{pad}}}")


def _value(key: str, value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return ", ".join(_value(key, v) for v in value)
    text = check_text(key, str(value))
    return text if _BARE.match(text) else f'"{text}"'
