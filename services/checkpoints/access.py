"""Where a version's directory is seen through its job's NFS exports and SMB shares.

`network_paths(version)` gives `nfs_path` (`host:/pseudo/rel`, what `mount -t nfs4` takes;
the port is the appliance's NFS port, `nfs_port` in credentials.json) and `smb_path`
(`\\\\host\\share\\rel`) for the export and the share of the job's file system whose
directory holds the version (the deepest one when several do; exports or shares whose
last change the daemon refused, state `error`, are not offered). A key is absent when
nothing exports (or shares) the directory. `host` is the address the file service listens
on (`strata up --file-bind`), else `--host`, else this machine's fully qualified name.
"""
import os
import socket

from django.apps import apps
from django.conf import settings

from plumbing.process import WILDCARDS


def file_host() -> str:
    """The name clients reach the appliance's NFS and SMB servers by."""
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    for key in ("file_bind", "data_host", "host"):
        value = options.get(key) or ""
        if value not in WILDCARDS:
            return value
    return socket.getfqdn()


def _inside(rel: str, root: str):
    """`rel` relative to `root` (both relative to the file system), or None if outside."""
    root = os.path.normpath(root or ".").strip("/")
    if root in ("", "."):
        return rel
    if rel == root:
        return ""
    if rel.startswith(root + "/"):
        return rel[len(root) + 1:]
    return None


def _deepest(rows, rel: str):
    """(row, rest) of the row whose directory holds `rel` most closely, or None."""
    best = None
    for row in rows:
        rest = _inside(rel, row.path)
        if rest is not None and (best is None or len(rest) < len(best[1])):
            best = (row, rest)
    return best


def network_paths(version) -> dict:
    """{"nfs_path"?, "smb_path"?} of a version's directory (see the module doc)."""
    fs = version.job.filesystem
    if not version.path or fs is None or not fs.path or not apps.is_installed("services.file"):
        return {}
    from services.file.public import ApplyState, NfsExport, SmbShare  # only when installed

    rel = os.path.relpath(os.path.realpath(version.path), os.path.realpath(fs.path))
    if rel.startswith(".."):
        return {}
    rel = "" if rel == "." else rel
    out, host = {}, None
    export = _deepest(NfsExport.objects.filter(filesystem=fs).exclude(state=ApplyState.ERROR),
                      rel)
    if export:
        host = file_host()
        row, rest = export
        path = row.pseudo.rstrip("/") + ("/" + rest if rest else "")
        out["nfs_path"] = f"{host}:{path or '/'}"
    share = _deepest(SmbShare.objects.filter(filesystem=fs).exclude(state=ApplyState.ERROR),
                     rel)
    if share:
        host = host or file_host()
        row, rest = share
        out["smb_path"] = "\\\\" + "\\".join(
            [host, row.name] + ([rest.replace("/", "\\")] if rest else []))
    return out
