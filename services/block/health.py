"""Live state of the block daemons, for /api/v1/health (starts nothing, takes no lock)."""
import socket

from django.conf import settings

from services.block import up


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def service_health() -> dict:
    """{"iscsi": {"state": "ok"|"down", "portal"}, "nbd": {"state", "endpoint"}}."""
    from services.block.transports.iscsi import TgtdTarget

    kw = up.runtime_kwargs(settings.DATA_DIR, settings.SERVICE_OPTIONS)
    tgtd = TgtdTarget(kw["state_dir"] / "tgtd", portal_host=kw["host"],
                      portal_port=kw["iscsi_port"])
    iscsi_ok = tgtd._answers() and _listening(kw["host"], kw["iscsi_port"])
    nbd_ok = ((kw["state_dir"] / "qsd" / "qsd-qmp.sock").exists()
              and _listening(kw["host"], kw["nbd_port"]))
    return {"iscsi": {"state": "ok" if iscsi_ok else "down",
                      "portal": f"{kw['host']}:{kw['iscsi_port']}"},
            "nbd": {"state": "ok" if nbd_ok else "down",
                    "endpoint": f"{kw['host']}:{kw['nbd_port']}"}}
