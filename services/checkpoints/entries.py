"""Which NFS entry each rank of a checkpoint job writes through, so that a burst of shards
spreads over the cluster's nodes instead of landing on one.

The entries are those of the NFS export of the job's file system (the export of the widest
directory, the file system's root when it is exported; exports whose last change was
refused are skipped), the nodes that are up only (see ``services.file.entries``). Ranks go
in groups of ``group_size`` (the ranks of one GPU host, say): rank ``r`` writes through
``entries[(r // group_size) % len(entries)]``. S3 entries are not given: the S3 gateway is
not placed on the cluster's nodes yet.
"""
from django.apps import apps

from plumbing.errors import Conflict, Invalid

MAX_RANKS = 65536


def _count(value, field: str, default: int | None = None) -> int:
    if value in (None, "") and default is not None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise Invalid(f"{field}: a whole number from 1 to {MAX_RANKS}") from None
    if not 1 <= number <= MAX_RANKS:
        raise Invalid(f"{field}: a whole number from 1 to {MAX_RANKS}")
    return number


def rank_entries(job, ranks, group_size=None) -> dict:
    """``{"export", "group_size", "entries": [...], "rank_entry": [index per rank]}`` for
    ``ranks`` ranks of ``job`` (see the module's docstring). Invalid (400) for a bad count;
    Conflict (409) when the job has no file system exported over NFS, or no entry is up."""
    ranks, group_size = _count(ranks, "ranks"), _count(group_size, "group_size", 1)
    fs = job.filesystem
    if fs is None or not apps.is_installed("services.file"):
        raise Conflict(f"Checkpoint job {job.name} writes to no file system, so it has no NFS "
                       "entries.", code="no_nfs_export")
    from services.file.public import ApplyState, NfsExport, export_entries  # only when installed

    exports = sorted(NfsExport.objects.filter(filesystem=fs).exclude(state=ApplyState.ERROR),
                     key=lambda e: (len(e.path.strip("/")), e.pk))
    if not exports:
        raise Conflict(f"File system {fs.name} of checkpoint job {job.name} is not exported "
                       "over NFS; export it first.", code="no_nfs_export")
    export = exports[0]
    up = [e for e in export_entries(export)["entries"] if e["state"] == "up"]
    if not up:
        raise Conflict(f"No node serving {export.pseudo} is up.", code="no_entry_up")
    return {"export": export.pseudo, "group_size": group_size, "entries": up,
            "rank_entry": [(r // group_size) % len(up) for r in range(ranks)]}
