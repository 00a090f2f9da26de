"""Live state of the S3 gateway `strata up` started, for /api/v1/health (starts nothing).
Nothing is reported when the plane runs without it (no S3 port in the service options)."""
from django.conf import settings

from plumbing.process import port_open, probe_address
from services.object.up import s3_address


def service_health() -> dict:
    """{"s3": {"state": "ok"|"down", "endpoint"}} when `strata up` runs the gateway."""
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    if not options.get("s3_port"):
        return {}
    host, port = s3_address(options)
    return {"s3": {"state": "ok" if port_open(probe_address(host), port) else "down",
                   "endpoint": f"{'https' if options.get('tls_cert') else 'http'}://{host}:{port}"}}
