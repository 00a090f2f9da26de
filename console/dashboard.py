"""What the dashboard shows: capacity per pool and tier, running jobs, alerts. Each service
contributes through its `health.py` (`service_alerts()`) and `metrics.py` (`capacity()`)."""
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from console.daemons import read_states
from plane.discovery import service_modules
from plane.models import Job


def alerts() -> list[dict]:
    """The services' alerts (degraded pools, replication lag, ...) and failed jobs of the
    last day."""
    out = [alert for _app, module in service_modules("health")
           if hasattr(module, "service_alerts") for alert in module.service_alerts()]
    for name, d in read_states(settings.DATA_DIR).items():
        if d["state"] == "failed":
            out.append({"level": "error", "text": f"{name} keeps exiting at once; strata up "
                        f"gave up starting it (see {d['log']})"})
        elif d["state"] == "restarting":
            out.append({"level": "warning", "text": f"{name} exited; strata up is starting "
                        "it again"})
    since = timezone.now() - timedelta(days=1)
    for job in Job.objects.filter(state="failed", finished_at__gte=since)[:10]:
        out.append({"level": "error", "text": f"Job {job.pk} ({job.kind} {job.target_name}) failed: {job.error[:200]}"})
    return out


def dashboard_context() -> dict:
    context = {"pools": [], "tiers": []}
    for _app, module in service_modules("metrics"):
        if hasattr(module, "capacity"):
            for key, rows in module.capacity().items():
                context[key] = context.get(key, []) + rows
    nodes = [node for _app, module in service_modules("health")
             if hasattr(module, "cluster_nodes") for node in module.cluster_nodes()]
    return {
        **context,
        "nodes": nodes,
        "running_jobs": Job.objects.filter(state__in=["pending", "running"])[:20],
        "alerts": alerts(),
        "daemons": read_states(settings.DATA_DIR),
        "tls": tls_trust(),
    }


def tls_trust() -> dict | None:
    """With `strata up --tls`: the certificate clients must trust (file, fingerprint)."""
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    if not options.get("tls_cert"):
        return None
    return {"cert": options["tls_cert"], "fingerprint": options.get("tls_fingerprint", ""),
            "generated": bool(options.get("tls_generated"))}
