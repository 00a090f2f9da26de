"""Live state of the block daemons, for /api/v1/health (starts nothing, takes no lock)."""
from django.conf import settings

from plumbing.packages import not_installed
from plumbing.process import port_open
from services.block import up
from services.block.transports.iscsi import TgtdTarget


def _state(answers, *programs: str) -> dict:
    """ok / down, or not_installed with what to install (``strata up`` left the daemon out:
    its protocol is off on this host, which is no fault of the running ones)."""
    why = not_installed(*programs)
    if why:
        return {"state": "not_installed", "detail": why}
    return {"state": "ok" if answers() else "down"}


def service_health() -> dict:
    """{"iscsi": {"state": "ok"|"down"|"not_installed", "portal"}, "nbd": {"state",
    "endpoint"}}; a not installed daemon's "detail" says which package to install."""
    kw = up.runtime_kwargs(settings.DATA_DIR, settings.SERVICE_OPTIONS)
    tgtd = TgtdTarget(kw["state_dir"] / "tgtd", portal_host=kw["host"],
                      portal_port=kw["iscsi_port"])
    iscsi = _state(lambda: tgtd._answers() and port_open(kw["host"], kw["iscsi_port"]),
                   "tgtd", "tgtadm")
    nbd = _state(lambda: ((kw["state_dir"] / "qsd" / "qsd-qmp.sock").exists()
                          and port_open(kw["host"], kw["nbd_port"])), "qemu-storage-daemon")
    return {"iscsi": {**iscsi, "portal": f"{kw['host']}:{kw['iscsi_port']}"},
            "nbd": {**nbd, "endpoint": f"{kw['host']}:{kw['nbd_port']}"}}
