"""Live state of the block daemons, for /api/v1/health (starts nothing, takes no lock)."""
from django.conf import settings

from plumbing.process import port_open
from services.block import up
from services.block.transports.iscsi import TgtdTarget


def service_health() -> dict:
    """{"iscsi": {"state": "ok"|"down", "portal"}, "nbd": {"state", "endpoint"}}."""
    kw = up.runtime_kwargs(settings.DATA_DIR, settings.SERVICE_OPTIONS)
    tgtd = TgtdTarget(kw["state_dir"] / "tgtd", portal_host=kw["host"],
                      portal_port=kw["iscsi_port"])
    iscsi_ok = tgtd._answers() and port_open(kw["host"], kw["iscsi_port"])
    nbd_ok = ((kw["state_dir"] / "qsd" / "qsd-qmp.sock").exists()
              and port_open(kw["host"], kw["nbd_port"]))
    return {"iscsi": {"state": "ok" if iscsi_ok else "down",
                      "portal": f"{kw['host']}:{kw['iscsi_port']}"},
            "nbd": {"state": "ok" if nbd_ok else "down",
                    "endpoint": f"{kw['host']}:{kw['nbd_port']}"}}
