"""Live state of the NFS and SMB servers `strata up` started, for /api/v1/health (starts
nothing, takes no lock). Nothing is reported when the plane runs without them (no ports in
the service options)."""
from django.conf import settings

from plumbing.process import port_open, probe_address
from services.file.daemons import file_bind


def service_health() -> dict:
    """{"nfs": {"state": "ok"|"down", "address"}, "smb": {...}} for each server configured."""
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    bind = file_bind(options)
    out = {}
    for name, key in (("nfs", "nfs_port"), ("smb", "smb_port")):
        if options.get(key):
            port = int(options[key])
            out[name] = {"state": "ok" if port_open(probe_address(bind), port) else "down",
                         "address": f"{bind}:{port}"}
    return out
