"""Each `strata up`, after pools are online: reconcile every export, share and SMB user into
the ganesha.nfsd and smbd just started, and tell credentials.json where they listen."""
import logging

from django.conf import settings

from services.file import service

log = logging.getLogger(__name__)


def reconcile() -> dict:
    """After `strata up` started ganesha.nfsd or smbd again: every export, share and SMB user
    as the rows say (the daemon was started with the config last applied; this catches up)."""
    return service.reconcile_all(force_reload=True)


def bootstrap(creds: dict) -> dict:
    """Apply all rows to the fresh daemons; returns the NFS and SMB ports for credentials."""
    summary = service.reconcile_all(force_reload=True)
    for key, value in summary.items():
        if isinstance(value, dict) and (value.get("errors") or value.get("failed")):
            print(f"file: {key}: {value}", flush=True)
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    return {"nfs_port": int(options.get("nfs_port") or 2049),
            "smb_port": int(options.get("smb_port") or 445)}
