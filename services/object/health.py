"""Live state of the S3 gateway `strata up` started, for /api/v1/health (starts nothing).
Nothing is reported when the plane runs without it (no S3 port in the service options)."""
import json

from django.conf import settings

from plumbing.process import port_open, probe_address
from services.object import gatewayconf
from services.object.up import s3_address


def service_health() -> dict:
    """{"s3": {"state": "ok"|"down", "endpoint", "workers", "worker_restarts",
    "last_worker_restart"}} when `strata up` runs the gateway: the worker figures are those
    of the gateway's parent (its record, ``run/s3/workers.json``) since it started, when it
    runs several workers; a worker that died and was started again is counted there, with
    why it exited (``SIGKILL``, ``code 1``) and when."""
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    if not options.get("s3_port"):
        return {}
    host, port = s3_address(options)
    s3 = {"state": "ok" if port_open(probe_address(host), port) else "down",
          "endpoint": f"{'https' if options.get('tls_cert') else 'http'}://{host}:{port}"}
    try:
        record = json.loads(gatewayconf.workers_path(settings.DATA_DIR).read_text())
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict):
        slots = record.get("slots") or {}
        s3.update(workers={slot: entry.get("state") for slot, entry in slots.items()},
                  worker_restarts=record.get("restarts", 0),
                  last_worker_restart=record.get("last_restart"))
    return {"s3": s3}
