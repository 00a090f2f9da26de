"""Every start of `strata up`: the pool named `default` on first start, and every pool brought
back online (mounted again after a reboot). Runs before the other services' bootstraps,
whose exports and shares live on these pools. At stop, once every daemon has stopped, the
pools are released: unmounted, and the loop devices of their image files detached."""
from django.conf import settings

from dataplane.errors import DataplaneError

from services.storage import service
from services.storage.drivers import default_driver_kind, driver_for
from services.storage.models import FileSystem, Pool


def ensure_default_pool(size: str) -> str:
    """Create the pool named `default` once (a user who deletes it keeps it deleted)."""
    marker = settings.DATA_DIR / ".default-pool-created"
    if marker.exists():
        return "exists"
    kind = default_driver_kind()
    devices = [{"path": f"image:{size}", "fault_domain": "default"}] if kind == "local" else []
    service.create_pool(name="default", driver=kind, devices=devices, redundancy="none",
                        media="flash")
    marker.write_text(kind + "\n")
    return f"created ({kind})"


def bring_pools_online() -> dict:
    """Every pool attached now (a back-off left by the last run does not count)."""
    return {p.name: service.refresh_pool(p, attach=True).state for p in Pool.objects.all()}


def secure_kept_filesystems() -> None:
    """Each file system a service keeps, on a pool that is up, put back the way its service
    needs it (no quota, root's alone): an earlier version let the API change them, and such
    a state must not keep the appliance from starting."""
    for fs in FileSystem.objects.exclude(kept_by="").select_related("pool"):
        if fs.pool.state not in ("online", "degraded"):
            continue
        try:
            changed = service.secure_kept_filesystem(fs)
        except (DataplaneError, OSError) as exc:
            print(f"file system {fs.name} (kept by {fs.kept_by}): could not be checked: {exc}")
            continue
        if changed:
            print(f"file system {fs.name} is kept by the {fs.kept_by} service: "
                  f"{'; '.join(changed)} (such changes are refused now)")


def bootstrap(creds: dict) -> dict:
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    if options.get("plane_only"):   # `strata plane`: pools live on the nodes that hold them
        return {}
    size = options.get("default_pool_size", "10G")
    print(f"default pool: {ensure_default_pool(size)}")
    for name, state in bring_pools_online().items():
        print(f"pool {name}: {state}")
    secure_kept_filesystems()
    return {}


def shutdown() -> None:
    """Release every pool this machine mounts (spdk pools live in spdk_tgt: left alone)."""
    for pool in Pool.objects.exclude(driver="spdk"):
        try:
            driver_for(pool.driver).deactivate_pool(pool.name)
            print(f"pool {pool.name}: released")
        except DataplaneError as exc:
            print(f"pool {pool.name}: still mounted: {exc}")
