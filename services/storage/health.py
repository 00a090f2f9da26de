"""Live state of each pool for /api/v1/health, and the storage alerts of the dashboard."""
from dataplane.errors import DataplaneError
from services.storage.drivers import driver_for
from services.storage.models import FileSystem, Pool

QUOTA_NEAR_FULL = 0.9


def pool_health() -> dict:
    out = {}
    for pool in Pool.objects.all():
        try:
            info = driver_for(pool.driver).pool_info(pool.name)
            out[pool.name] = {"state": info.health, "used_bytes": info.used_bytes,
                              "size_bytes": info.size_bytes}
            if info.health_detail:
                out[pool.name]["detail"] = info.health_detail
            if pool.health_detail.get("attach"):   # tries to attach it, on a back-off
                out[pool.name]["attach"] = {**pool.health_detail["attach"],
                                            "error": pool.error}
        except DataplaneError as exc:
            out[pool.name] = {"state": "error", "detail": str(exc)}
    return out


def service_alerts() -> list[dict]:
    """Degraded or failed pools, file systems near their quota."""
    out = []
    for pool in Pool.objects.exclude(state="online"):
        out.append({"level": "error" if pool.state != "degraded" else "warning",
                    "text": f"Pool {pool.name} is {pool.state}" + (f": {pool.error}" if pool.error else "")})
    for fs in FileSystem.objects.filter(quota_bytes__isnull=False):
        if fs.quota_bytes and fs.used_bytes >= QUOTA_NEAR_FULL * fs.quota_bytes:
            out.append({"level": "warning",
                        "text": f"File system {fs.name} uses {fs.used_bytes * 100 // fs.quota_bytes}% of its quota"})
    return out
