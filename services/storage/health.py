"""Live state of each pool, for /api/v1/health."""
from dataplane.errors import DataplaneError
from services.storage.drivers import driver_for
from services.storage.models import Pool


def pool_health() -> dict:
    out = {}
    for pool in Pool.objects.all():
        try:
            info = driver_for(pool.driver).pool_info(pool.name)
            out[pool.name] = {"state": info.health, "used_bytes": info.used_bytes,
                              "size_bytes": info.size_bytes}
        except DataplaneError as exc:
            out[pool.name] = {"state": "error", "detail": str(exc)}
    return out
