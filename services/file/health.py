"""Live state of the NFS and SMB servers `strata up` started, for /api/v1/health (starts
nothing, takes no lock). Nothing is reported when the plane runs without them (no ports in
the service options)."""
from django.conf import settings

from plumbing.process import port_open


def _probe_host(bind: str) -> str:
    return "127.0.0.1" if bind in ("", "0.0.0.0", "*", "::") else bind


def service_health() -> dict:
    """{"nfs": {"state": "ok"|"down", "address"}, "smb": {...}} for each server configured."""
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    bind = options.get("file_bind") or options.get("host") or "127.0.0.1"
    out = {}
    for name, key in (("nfs", "nfs_port"), ("smb", "smb_port")):
        if options.get(key):
            port = int(options[key])
            out[name] = {"state": "ok" if port_open(_probe_host(bind), port) else "down",
                         "address": f"{bind or '0.0.0.0'}:{port}"}
    return out
