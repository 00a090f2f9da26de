"""Every `strata up`, after pools are online: give the S3 gateway its data root (a file
system ``s3`` on the pool named ``default``, made once) and, when the appliance has a pool
of media ``capacity``, its cold root for lifecycle transitions (a file system
``s3-cold-<pool>`` on the first such pool by name, made once), make sure the admin has an S3 key,
write the gateway's config, open the launcher's gate, wait for the gateway, and reconcile
buckets. Returns the admin's S3 credentials for credentials.json."""
import json
import logging
import os
import secrets

from django.conf import settings

from plumbing.atomic import write_json_atomic
from services.object import gatewayconf, service
from services.object.models import Gateway, S3Key
from services.storage import service as storage
from services.storage.models import FileSystem, Pool

log = logging.getLogger(__name__)
FILESYSTEM = "s3"
NODE_LIFECYCLE_INTERVAL = 3600   # seconds, as beat runs the plane's lifecycle Job


def _pick_pool() -> Pool | None:
    """The pool `--s3-pool` names (None while it does not exist: the gateway's data is never
    put elsewhere behind the user's back), else ``default``, else the first online pool."""
    wanted = service._options().get("s3_pool")
    if wanted:
        return Pool.objects.filter(name=wanted).first()
    return Pool.objects.filter(name="default").first() or Pool.objects.filter(state="online").first()


def ensure_gateway() -> Gateway | None:
    """The gateway row and its file system (created on the first start); None without a pool."""
    gw = Gateway.objects.select_related("filesystem", "filesystem__pool").first()
    if gw is not None:
        return gw
    fs = FileSystem.objects.filter(name=FILESYSTEM).first()
    if fs is None:
        pool = _pick_pool()
        if pool is None:
            return None
        fs = storage.create_filesystem(name=FILESYSTEM, pool=pool, kept_by="object")
    return Gateway.objects.create(filesystem=fs, admin_token=secrets.token_urlsafe(32))


def ensure_cold_filesystem() -> str | None:
    """The gateway's cold root, making its file system on the first usable capacity pool (by
    name) when there is none yet; None without a capacity pool."""
    fs = service.cold_filesystem()
    if fs is None:
        pool = (Pool.objects.filter(media="capacity", state__in=service.USABLE_POOL_STATES)
                .order_by("name").first())
        if pool is None:
            return None
        fs = storage.create_filesystem(name=f"{service.COLD_PREFIX}{pool.name}"[:63], pool=pool,
                                       kept_by="object")
    if fs.pool.state not in service.USABLE_POOL_STATES or not fs.path or not os.path.isdir(fs.path):
        log.error("object service: the S3 cold file system %s (pool %s, %s) is not available at %s; "
                  "lifecycle transitions wait until it is back", fs.name, fs.pool.name, fs.pool.state, fs.path)
        return None
    private_dir(f"{fs.path.rstrip('/')}/{service.DATA_SUBDIR}")
    return service.cold_root()


def ensure_admin_key(creds: dict) -> tuple[S3Key, str]:
    """The admin's key from credentials.json if it still exists, else a new admin key."""
    key = S3Key.objects.filter(access_key=creds.get("s3_access_key") or "").first()
    if key is not None:
        return key, service.secret_of(key)
    return service.create_key(user=creds.get("username") or "admin", admin=True,
                              description="appliance admin (credentials.json)")


def private_dir(path: str) -> None:
    """The gateway's data directory, root's alone (0700) whatever its file system's root
    says: its segment files hold every object's raw bytes."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def open_gate(gw: Gateway) -> None:
    """Let the launcher start the gateway on the (now mounted) data root."""
    root = service.data_root(gw)
    private_dir(root)
    write_json_atomic(gatewayconf.gate_path(settings.DATA_DIR), {"data_root": root})


def bootstrap(creds: dict) -> dict:
    gw = ensure_gateway()
    if gw is None:
        wanted = service._options().get("s3_pool") or "default"
        log.warning("object service: no pool to keep S3 data on; S3 starts once pool %s is "
                    "created (e.g. `strata pool create %s --driver ceph ...`)", wanted, wanted)
        return {}
    service.ensure_master_key(gw)   # before the pool is checked: nodes may render it first
    if service.store_kind() == service.RADOS:
        try:
            service.store_pool(gw)
        except service.Conflict as exc:
            log.error("object service: %s S3 is not served.", exc.message)
            return {}
    key, secret = ensure_admin_key(creds)
    service.ensure_plane_key()
    try:
        ensure_cold_filesystem()
    except Exception:  # noqa: BLE001 - S3 serves without a capacity tier; the log says why
        log.exception("object service: could not make the S3 cold file system; lifecycle "
                      "transitions are refused until it exists")
    service.write_gateway_config()
    answer = {"s3_endpoint": service.public_endpoint(), "s3_access_key": key.access_key,
              "s3_secret_key": secret, "s3_region": gw.region}
    fs = gw.filesystem
    if service._options().get("plane_only") and service.store_kind() == service.RADOS:
        return answer   # `strata plane`: the nodes assigned `object` run the gateways
    if not _attached(fs):
        # never start the gateway on an empty directory where the pool should be mounted: it
        # would serve no buckets, and the reconcile would forget them all
        log.error("object service: file system %s (pool %s, %s) is not available at %s; the S3 "
                  "gateway waits until the pool is attached again (storage.attach_pools tries "
                  "on a back-off; object.open_gate starts the gateway then)",
                  fs.name, fs.pool.name, fs.pool.state, fs.path)
        return answer
    _serve(gw)
    return answer


def _attached(fs: FileSystem) -> bool:
    if service.store_kind() == service.RADOS:   # the buckets are in RADOS, not on a mount
        return fs.pool.state in service.USABLE_POOL_STATES
    return fs.pool.state in service.USABLE_POOL_STATES and os.path.isdir(fs.path)


def _serve(gw: Gateway) -> None:
    open_gate(gw)
    try:
        service.wait_until_serving()
    except service.GatewayUnavailable as exc:
        # the rest of the appliance serves on; health shows S3 down and log/s3.log says why
        log.error("object service: %s S3 is not served until that is fixed and `strata up` "
                  "is restarted.", exc)
        return
    summary = service.reconcile_buckets()
    if any(summary.values()):
        log.info("object service: buckets reconciled: %s", summary)


def open_gate_when_attached() -> str:
    """Under `strata up`, when the start found the pool of the gateway's data unattached
    (its cluster down, its mount missing): start the gateway once the pool is back."""
    if not service._options().get("supervised") or \
            gatewayconf.gate_path(settings.DATA_DIR).exists():
        return "open"
    gw = Gateway.objects.select_related("filesystem", "filesystem__pool").first()
    if gw is None:
        if service._options().get("plane_only") and service.store_kind() != service.RADOS:
            return "no gateway"   # `strata plane` with the file store serves no S3
        return _bootstrap_when_pool_exists()
    if not _attached(gw.filesystem):
        return f"waiting for pool {gw.filesystem.pool.name}"
    log.warning("object service: pool %s is attached: starting the S3 gateway",
                gw.filesystem.pool.name)
    _serve(gw)
    return "opened"


def _bootstrap_when_pool_exists() -> str:
    """The start found no pool to keep S3 data on (`--s3-pool` names one not made yet): once
    it exists, do what that start could not (the bootstrap above: the gateway's file system,
    the admin's key, the config, the gate) and add the admin's S3 credentials to
    credentials.json."""
    pool = _pick_pool()
    if pool is None or pool.state not in service.USABLE_POOL_STATES:
        return f"waiting for pool {service._options().get('s3_pool') or 'default'}"
    log.warning("object service: pool %s exists: starting the S3 gateway", pool.name)
    path = settings.DATA_DIR / "credentials.json"
    creds = json.loads(path.read_text()) if path.exists() else {}
    answer = bootstrap(creds)
    if answer:
        write_json_atomic(path, {**creds, **answer}, mode=0o600, indent=2)
    return "bootstrapped" if answer else "no gateway"


def node_gateway_config(node: str, redis_url: str) -> dict:
    """The gateway config of cluster node ``node`` (RADOS store only): the plane's document
    with the node's own cephx client of the pool; ``ceph_conf``, ``keyring`` and
    ``data_root`` are left for the node's agent to fill (its files, under its data dir),
    ``store.ceph_pool`` names the Ceph pool whose client files it uses. Conflict when the
    store is the file store (a node has no share of the plane's data root)."""
    if service.store_kind() != service.RADOS:
        raise service.Conflict("S3 on cluster nodes needs the RADOS store (`strata plane "
                               "--s3-store rados --s3-pool CEPH_POOL`); the file store is "
                               "served by one gateway.", code="s3_store_not_shared")
    gw = ensure_gateway()
    if gw is None:
        raise service.Unavailable(f"The S3 pool {service._options().get('s3_pool') or 'default'} "
                                  "does not exist yet.", code="s3_pool_missing")
    service.ensure_plane_key()
    if service.ensure_master_key(gw):
        service.write_gateway_config()   # the plane's own rendering holds the same key
    pool = service.store_pool(gw)
    store = service.rados_store(gw, storage.node_entity(node, pool)[len("client."):], "", "")
    config = service._render(gw, "", redis_url, {**store, "ceph_pool": pool.name})
    # lifecycle passes from the nodes' own timers, one at a time under the pool's RADOS lock
    # and about one per interval between them (the plane may run no gateway to run its Job)
    config["lifecycle_interval"] = NODE_LIFECYCLE_INTERVAL
    return config
