"""What the dashboard shows: capacity per pool and tier, running jobs, alerts."""
from datetime import timedelta

from django.utils import timezone

from plane.models import Job

QUOTA_NEAR_FULL = 0.9


def alerts() -> list[dict]:
    """Degraded or failed pools, failed jobs of the last day, file systems near their quota."""
    from services.storage.models import FileSystem, Pool

    out = []
    for pool in Pool.objects.exclude(state="online"):
        out.append({"level": "error" if pool.state != "degraded" else "warning",
                    "text": f"Pool {pool.name} is {pool.state}" + (f": {pool.error}" if pool.error else "")})
    since = timezone.now() - timedelta(days=1)
    for job in Job.objects.filter(state="failed", finished_at__gte=since)[:10]:
        out.append({"level": "error", "text": f"Job {job.pk} ({job.kind} {job.target_name}) failed: {job.error[:200]}"})
    for fs in FileSystem.objects.filter(quota_bytes__isnull=False):
        if fs.quota_bytes and fs.used_bytes >= QUOTA_NEAR_FULL * fs.quota_bytes:
            out.append({"level": "warning",
                        "text": f"File system {fs.name} uses {fs.used_bytes * 100 // fs.quota_bytes}% of its quota"})
    return out + service_alerts()


def service_alerts() -> list[dict]:
    """Each service app's `health.py` `service_alerts()` (replication lag, failed backups)."""
    from plane.discovery import service_modules

    return [alert for _app, module in service_modules("health")
            if hasattr(module, "service_alerts") for alert in module.service_alerts()]


def dashboard_context() -> dict:
    from services.storage.models import Pool

    pools = list(Pool.objects.all())
    tiers: dict = {}
    for pool in pools:
        t = tiers.setdefault(pool.media, {"media": pool.media, "size_bytes": 0, "used_bytes": 0})
        t["size_bytes"] += pool.size_bytes
        t["used_bytes"] += pool.used_bytes
    return {
        "pools": pools,
        "tiers": sorted(tiers.values(), key=lambda t: t["media"]),
        "running_jobs": Job.objects.filter(state__in=["pending", "running"])[:20],
        "alerts": alerts(),
    }
