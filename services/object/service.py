"""The object service's logic: mirror buckets into the S3 gateway through its admin interface
and write its config file (access keys, KMS keys) whenever keys change.

Every change of a bucket runs inside one database transaction with the gateway call, so a
refusal from the gateway rolls the row back. Key changes rewrite the gateway's config after
the transaction commits, under a file lock, from the whole table: whichever process (web
server or worker) writes last has read every committed key. The gateway re-reads the file on
its next request, so it never queries the database.
"""
import base64
import logging
import os
import secrets
import string
import time

from django.conf import settings
from django.db import IntegrityError, transaction
from django.dispatch import Signal
from django.utils import timezone

from plane.models import IOBudgetSetting
from plane.secrets import seal, unseal
from plumbing.process import WILDCARDS
from plumbing.errors import Conflict, Invalid, NotFound, Unavailable
from plumbing.workclass import CHECKPOINTS, SAMPLES, read_shares
from services.object import gatewayconf
from services.object.admin_client import GatewayAdminClient, GatewayAdminError
from services.object.models import Bucket, Gateway, KmsKey, S3Key
from services.object.up import s3_address
from services.storage.models import FileSystem

log = logging.getLogger(__name__)
# sent when the rendered gateway config changed while every node runs a gateway (RADOS store)
node_config_changed = Signal()
# sent to find the cluster nodes whose gateway runs now (RADOS store): the nodes service
# answers ``[{"name", "options"}]``, each node's daemon options (as its heartbeat gets them)
find_node_gateways = Signal()
DATA_SUBDIR = "gateway"  # the gateway's data root inside its file system
KEY_ALPHABET = string.ascii_uppercase + string.digits


class GatewayUnavailable(Unavailable):
    """The S3 gateway does not answer (not started, or still starting)."""

    code = "gateway_unavailable"

    def __init__(self, message: str = "The S3 gateway is not running; start it with `strata up`.",
                 code: str | None = None):
        super().__init__(message, code)


class GatewayRefused(Unavailable):
    """The gateway failed an admin call (a server error, or it refused the plane's token)."""

    code = "gateway_error"


# a refusal of the request itself, by the gateway's HTTP status (other 4xx: Invalid)
_REFUSAL_BY_STATUS = {404: NotFound, 409: Conflict}


# -- where the gateway is --------------------------------------------------------------------

def _options() -> dict:
    return getattr(settings, "SERVICE_OPTIONS", {}) or {}


def _reachable_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def admin_endpoint() -> str:
    """URL the plane uses to reach the gateway (its admin interface shares the S3 port)."""
    options = _options()
    host, port = s3_address(options)
    scheme = "https" if options.get("tls_cert") else "http"
    return f"{scheme}://{_reachable_host(host)}:{port}"


def node_endpoints() -> list[str]:
    """The admin URLs of the cluster nodes' gateways that run now (RADOS store: each serves
    every bucket), by node name; where each node's gateway listens, as its agent starts it."""
    urls = []
    for receiver, answer in find_node_gateways.send_robust(sender=Gateway):
        if isinstance(answer, Exception):
            log.error("object service: the nodes serving S3 could not be listed (%s): %s",
                      getattr(receiver, "__qualname__", receiver), answer)
            continue
        for node in sorted(answer, key=lambda n: n["name"]):
            host, port = s3_address(node["options"])
            if host in WILDCARDS:       # every address of the node: its data address
                host = node["options"].get("data_host") or node["options"].get("host") or host
            urls.append(f"http://{_reachable_host(host)}:{port}")
    return urls


def admin_endpoints() -> list[str]:
    """The gateways the plane calls, in the order tried: the one `strata up` runs, then (RADOS
    store) every cluster node's that runs now; none under `strata plane` with no such node."""
    own = [] if _options().get("plane_only") else [admin_endpoint()]
    return own + (node_endpoints() if store_kind() == RADOS else [])


def gateway_endpoint() -> str:
    """The first gateway the plane calls: `strata up`'s own or, under `strata plane` (which
    runs none), a cluster node's that runs now (the plane's own address only while none
    does)."""
    return (admin_endpoints() or [admin_endpoint()])[0]


def public_endpoint() -> str:
    """The S3 endpoint users are given (credentials.json, the console, a new key): the
    ``s3_endpoint`` option when set (a load balancer, a name of the nodes), else
    :func:`gateway_endpoint`."""
    return _options().get("s3_endpoint") or gateway_endpoint()


def gateway() -> Gateway:
    """The gateway's row (made by the bootstrap)."""
    gw = Gateway.objects.select_related("filesystem", "filesystem__pool").first()
    if gw is None:
        raise GatewayUnavailable("The object service has no data root yet; `strata up` creates "
                                 "it on a pool named default (run it once with a pool).")
    return gw


def data_root(gw: Gateway) -> str:
    """The gateway's data root: a directory in its file system; with the RADOS store a
    private local directory (its run and temporary files only: the buckets are in RADOS)."""
    if store_kind() == RADOS:
        return str(gatewayconf.rados_data_root(settings.DATA_DIR))
    return f"{gw.filesystem.path.rstrip('/')}/{DATA_SUBDIR}"


# -- the store: files in the data root (default) or a RADOS pool shared by every node --------

FILE, RADOS = "file", "rados"
STORE_KINDS = (FILE, RADOS)


def store_kind() -> str:
    """``s3_store`` of `strata up` / `strata plane` (``--s3-store``): file (default) or rados."""
    return _options().get("s3_store") or FILE


def store_pool(gw: Gateway):
    """The Ceph pool whose RADOS pool keeps the buckets (the gateway file system's pool);
    Conflict (a clear reason) when the RADOS store is asked for on a pool that is not Ceph."""
    pool = gw.filesystem.pool
    if pool.driver != "ceph":
        raise Conflict(f"The RADOS S3 store needs the S3 pool to be a Ceph pool; pool "
                       f"{pool.name} is {pool.driver} (choose one with --s3-pool, or drop "
                       "--s3-store rados).", code="s3_store_needs_ceph")
    return pool


def rados_store(gw: Gateway, client: str, ceph_conf: str, keyring: str) -> dict:
    """The config's ``store`` entry for a gateway reaching the pool as ``client``."""
    from services.storage import service as storage   # noqa: PLC0415  (the plane's side)
    pool = store_pool(gw)
    return {"kind": RADOS, "pool": storage.rados_pool(pool), "client": client,
            "ceph_conf": ceph_conf, "keyring": keyring}


ADMIN_TIMEOUT = 10.0
# RADOS store: a bucket's creation, deletion or settings change answers once every gateway
# watching it acknowledged the notify; one that died is waited for until its watch lapses,
# up to 30 s (gateway/rados_buckets.py NOTIFY_MS): the plane waits longer than that
RADOS_ADMIN_TIMEOUT = 45.0


def admin_client(timeout: float | None = None) -> GatewayAdminClient:
    """A client of the gateways' admin interface (:func:`admin_endpoints`, the next one tried
    when one cannot be reached); GatewayUnavailable when there is none to call. Without
    ``timeout``, the store's (RADOS: long enough for a notify that waits on a dead node)."""
    if timeout is None:
        timeout = RADOS_ADMIN_TIMEOUT if store_kind() == RADOS else ADMIN_TIMEOUT
    gw = gateway()
    endpoints = admin_endpoints()
    if not endpoints:
        if store_kind() != RADOS:
            raise GatewayUnavailable("`strata plane` runs no S3 gateway and the file store is "
                                     "served by `strata up` alone; start the plane with "
                                     "`--s3-store rados --s3-pool CEPH_POOL` to serve buckets "
                                     "from the cluster's nodes.", code="no_s3_gateway")
        raise GatewayUnavailable("No cluster node serves S3 now: assign the object service to "
                                 "a node (`strata node assign NAME --services object`) and "
                                 "wait until its gateway runs.", code="no_s3_gateway")
    return GatewayAdminClient(endpoints, gw.admin_token, timeout=timeout)


def admin_call(fn, *args, **kwargs):
    """Call the admin interface; map its refusals to domain errors a user can act on
    (``plumbing.errors``: 400 Invalid, 404 NotFound, 409 Conflict, 503 Unavailable)."""
    try:
        return fn(*args, **kwargs)
    except GatewayAdminError as err:
        if err.status == 0:
            raise GatewayUnavailable(f"The S3 gateway does not answer: {err.message}") from None
        if err.code in ("BucketNotEmpty", "BucketAlreadyExists", "BucketAlreadyOwnedByYou"):
            raise Conflict(err.message or err.code, code=err.code) from None
        if err.code == "InvalidBucketName":
            raise Invalid(f"name: {err.message}") from None
        if err.code == "NoSuchBucket":
            raise NotFound(err.message) from None
        message = f"The S3 gateway refused: {err.code}: {err.message}"
        if 400 <= err.status < 500 and err.status not in (401, 403):
            raise _REFUSAL_BY_STATUS.get(err.status, Invalid)(message, code=err.code) from None
        raise GatewayRefused(message, code=err.code) from None


# -- the config file (keys) ------------------------------------------------------------------

def render_gateway_config() -> dict | None:
    """The gateway's config document from the database (None before the bootstrap)."""
    gw = Gateway.objects.select_related("filesystem").first()
    if gw is None:
        return None
    store = None
    if store_kind() == RADOS:
        try:
            ceph = store_pool(gw).ceph
        except Conflict as exc:
            log.error("object service: %s", exc.message)
            return None
        store = rados_store(gw, ceph.get("client") or "admin", ceph.get("conf") or "",
                            ceph.get("keyring") or "")
    return _render(gw, data_root(gw), settings.CELERY_BROKER_URL, store)


def _render(gw: Gateway, root: str, redis_url: str, store: dict | None) -> dict:
    users = {k.access_key: {"secret_key": unseal(k.sealed_secret), "user": k.user, "admin": k.admin}
             for k in S3Key.objects.all()}
    return gatewayconf.render_config(data_root=root, admin_token=gw.admin_token,
                                     users=users, region=gw.region,
                                     domains=_options().get("s3_domains"),
                                     io_budget_redis=redis_url,
                                     io_budget=io_budget_rates(),
                                     cold_root=None if store else cold_root(),
                                     # every gateway of a RADOS store (each node's) decrypts
                                     # what any other encrypted: all hold the same keys
                                     sse_master_key=unseal(gw.sealed_master_key) if gw.sealed_master_key else "",
                                     kms_keys=kms_keys_config(gw.region), qos=qos_config(),
                                     store=store)


def refuse_on_nodes(node: str) -> None:
    """Conflict when cluster node ``node`` may not be assigned ``object``: the file store
    keeps the buckets in the plane's data root, which one gateway serves."""
    if store_kind() != RADOS:
        raise Conflict(f"Node {node} cannot serve S3 while the buckets are in the file store "
                       "(one gateway); start the plane with `--s3-store rados --s3-pool "
                       "CEPH_POOL` to serve them from every node.", code="s3_store_not_shared")


def ensure_master_key(gw: Gateway) -> bool:
    """Give the gateway its SSE master key on the first start (sealed in the database; the
    gateway gets it in its 0600 config file, outside the data root; never logged). True when
    it was made now."""
    if gw.sealed_master_key:
        return False
    gw.sealed_master_key = seal(base64.b64encode(secrets.token_bytes(32)).decode())
    gw.save(update_fields=["sealed_master_key"])
    return True


# -- KMS keys (SSE-KMS) -----------------------------------------------------------------------

def kms_keys_config(region: str) -> dict:
    """The gateway config's ``kms_keys``: every key's material (unsealed), state, alias and ARN."""
    return {k.key_id: {"material": unseal(k.sealed_material), "enabled": k.enabled,
                       "aliases": [k.alias] if k.alias else [], "arn": k.arn(region)}
            for k in KmsKey.objects.all()}



# -- the capacity tier (lifecycle transitions) ------------------------------------------------

COLD_PREFIX = "s3-cold-"
USABLE_POOL_STATES = ("online", "degraded")


def cold_filesystem():
    """The file system on a capacity pool that holds the gateway's cold bytes, if made
    (``s3-cold-<pool>``, by the bootstrap: see ``bootstrap.ensure_cold_filesystem``)."""
    return (FileSystem.objects.select_related("pool")
            .filter(name__startswith=COLD_PREFIX, pool__media="capacity").order_by("name").first())


def cold_root() -> str | None:
    """The gateway's ``cold_root``: a directory in the cold file system, only while its pool is
    usable and the directory exists (never an empty mount point)."""
    fs = cold_filesystem()
    if fs is None or fs.pool.state not in USABLE_POOL_STATES or not fs.path:
        return None
    root = f"{fs.path.rstrip('/')}/{DATA_SUBDIR}"
    return root if os.path.isdir(root) else None


def qos_config() -> dict:
    """The gateway config's ``qos``: the classes' shares (``plumbing.workclass``, as the plane
    last wrote them for `strata up`) and the class of each bucket not in the default one."""
    return {"shares": read_shares(settings.DATA_DIR),
            "buckets": dict(Bucket.objects.exclude(workload_class=SAMPLES)
                            .values_list("name", "workload_class"))}


def io_budget_rates() -> dict:
    """The appliance I/O budget's rates in bytes (``services.tiering``), for transitions.
    A change through the API reaches the gateway with its next config write."""
    # read, never create, the row here: a save would rewrite this config (signals.py) while
    # write_gateway_config holds its lock
    row = IOBudgetSetting.objects.filter(pk=1).first() or IOBudgetSetting()
    mib = 1 << 20
    return {"rate": row.rate_mbps * mib, "burst": row.burst_mb * mib,
            "classes": {k: int(v) * mib for k, v in (row.class_rates_mbps or {}).items()},
            "foreground_share": row.foreground_share}


def write_gateway_config() -> bool:
    """Re-render and install the gateway's config; True if the file changed."""
    path = gatewayconf.config_path(settings.DATA_DIR)
    with gatewayconf.locked(path):
        config = render_gateway_config()
        if config is None:
            return False
        changed = gatewayconf.write_config(path, config)
    if changed and store_kind() == RADOS:
        # the nodes' gateways fetch their configs again (keys, KMS keys, classes): the nodes
        # service listens (the object service imports nothing of it)
        node_config_changed.send(sender=Gateway)
    return changed


def _write_config_after_commit() -> None:
    transaction.on_commit(write_gateway_config)


# -- access keys -----------------------------------------------------------------------------

def new_access_key() -> str:
    return "SK" + "".join(secrets.choice(KEY_ALPHABET) for _ in range(18))


def create_key(*, user: str, admin: bool = False, description: str = "", created_by=None,
               secret_key: str | None = None, system: bool = False) -> tuple[S3Key, str]:
    """A new access key for S3 user ``user``; returns the row and its secret (shown once)."""
    secret = secret_key or secrets.token_urlsafe(30)
    with transaction.atomic():
        key = S3Key.objects.create(access_key=new_access_key(), sealed_secret=seal(secret), user=user,
                                   admin=admin, description=description, created_by=created_by,
                                   system=system)
        _write_config_after_commit()
    return key, secret


def delete_key(key: S3Key) -> None:
    """Revoke a key: the gateway refuses it (InvalidAccessKeyId) from its next request."""
    if key.system:
        raise Conflict(f"Key {key.access_key} is the management plane's own (checkpoint "
                       "verification, tiering); it cannot be deleted.")
    with transaction.atomic():
        key.delete()
        _write_config_after_commit()


def secret_of(key: S3Key) -> str:
    return unseal(key.sealed_secret)


PLANE_USER = "strata-plane"


def ensure_plane_key() -> S3Key:
    """The plane's own admin key (made once), for services that read S3 themselves."""
    key = S3Key.objects.filter(system=True).first()
    if key is None:
        key, _ = create_key(user=PLANE_USER, admin=True, description="management plane",
                            system=True)
    return key


def plane_s3_config() -> dict | None:
    """``{"endpoint", "access_key", "secret_key", "region"}`` for the plane's own S3 clients
    (e.g. checkpoint verification over S3); None before the bootstrap."""
    key = S3Key.objects.filter(system=True).first()
    gw = Gateway.objects.first()
    if key is None or gw is None:
        return None
    return {"endpoint": gateway_endpoint(), "access_key": key.access_key,
            "secret_key": secret_of(key), "region": gw.region}


# -- buckets ---------------------------------------------------------------------------------

def _quota_body(quota_bytes, quota_objects) -> dict:
    return {k: v for k, v in (("bytes", quota_bytes), ("objects", quota_objects)) if v is not None}


def _apply_info(bucket: Bucket, info: dict) -> None:
    bucket.used_bytes = int(info.get("bytes") or 0)
    bucket.used_objects = int(info.get("objects") or 0)
    bucket.versioning = info.get("versioning") or bucket.versioning
    _apply_protection(bucket, info)
    if "acl" in info:  # gateways from before access settings do not report them
        bucket.acl = info["acl"]
        bucket.public_access_block = info.get("public_access_block")
        bucket.object_ownership = info.get("ownership") or ""
    bucket.usage_updated_at = timezone.now()


def _apply_protection(bucket: Bucket, info: dict) -> None:
    """Record a bucket's default encryption and Object Lock as the gateway reports them."""
    if "encryption" in info:
        enc = info["encryption"] or {}
        bucket.encryption, bucket.kms_key_id = enc.get("algorithm") or "", enc.get("kms_key_id") or ""
    if "object_lock" in info:
        lock = info["object_lock"]
        bucket.object_lock = lock is not None
        bucket.lock_mode, bucket.lock_days = (lock or {}).get("mode") or "", (lock or {}).get("days")


ACCESS_FIELDS = ("acl", "public_access_block", "object_ownership")
PROTECTION_FIELDS = ("encryption", "kms_key_id", "object_lock", "lock_mode", "lock_days")


def _access_body(changes: dict) -> dict:
    """The gateway admin interface's names for the access settings in ``changes``."""
    names = {"acl": "acl", "public_access_block": "public_access_block", "object_ownership": "ownership"}
    return {names[k]: (changes[k] or None) if k == "object_ownership" else changes[k]
            for k in ACCESS_FIELDS if k in changes}


def create_bucket(*, name: str, owner: str, quota_bytes=None, quota_objects=None,
                  versioning: str = Bucket.Versioning.DISABLED, object_lock: bool = False,
                  lock_mode: str = "", lock_days=None, encryption: str = "", kms_key_id: str = "",
                  workload_class: str = "samples", **access) -> Bucket:
    """Create a bucket (with Object Lock: versioning Enabled for good, and an optional default
    retention; with a default encryption; with access settings)."""
    gw = gateway()
    with transaction.atomic():
        bucket = Bucket.objects.create(name=name, owner=owner, filesystem=gw.filesystem,
                                       quota_bytes=quota_bytes, quota_objects=quota_objects,
                                       versioning=versioning, workload_class=workload_class)
        client = admin_client()
        info = admin_call(client.create_bucket, name, owner=owner,
                           versioning=None if versioning == Bucket.Versioning.DISABLED else versioning,
                           quota=_quota_body(quota_bytes, quota_objects) or None,
                           object_lock={"mode": lock_mode or None, "days": lock_days} if object_lock else None)
        if encryption:
            info.update(admin_call(client.set_encryption, name, encryption, kms_key_id or None))
        if _access_body(access):
            info.update(admin_call(client.set_access, name, **_access_body(access)))
        _apply_info(bucket, info)
        bucket.save()
        if workload_class != SAMPLES:
            transaction.on_commit(write_gateway_config)   # the gateway's admission follows
    return bucket


def class_as_checkpoints(name: str) -> bool:
    """A bucket that checkpoint jobs save into is in the checkpoints class of work (the
    gateway admits its requests there); True if it was in another. The operator may set it
    back (``workload_class``)."""
    moved = Bucket.objects.filter(name=name).exclude(workload_class=CHECKPOINTS).update(
        workload_class=CHECKPOINTS)
    if moved:
        transaction.on_commit(write_gateway_config)
    return bool(moved)


def update_bucket(bucket: Bucket, changes: dict) -> Bucket:
    """Apply quota (bytes/objects, None lifts it), versioning and access (canned ACL, public
    access block, object ownership) changes."""
    client = admin_client()
    with transaction.atomic():
        if changes.get("workload_class", bucket.workload_class) != bucket.workload_class:
            bucket.workload_class = changes["workload_class"]
            transaction.on_commit(write_gateway_config)   # the gateway's admission follows
        if "quota_bytes" in changes or "quota_objects" in changes:
            bucket.quota_bytes = changes.get("quota_bytes", bucket.quota_bytes)
            bucket.quota_objects = changes.get("quota_objects", bucket.quota_objects)
            admin_call(client.set_quota, bucket.name, bytes=bucket.quota_bytes,
                        objects=bucket.quota_objects)
        if changes.get("versioning") and changes["versioning"] != bucket.versioning:
            bucket.versioning = admin_call(client.set_versioning, bucket.name, changes["versioning"])
        if "encryption" in changes or "kms_key_id" in changes:
            _apply_protection(bucket, admin_call(client.set_encryption, bucket.name,
                                           changes.get("encryption", bucket.encryption) or None,
                                           changes.get("kms_key_id", bucket.kms_key_id) or None))
        if changes.get("object_lock") or "lock_mode" in changes or "lock_days" in changes:
            mode = changes.get("lock_mode", bucket.lock_mode) or None
            _apply_protection(bucket, admin_call(client.set_object_lock, bucket.name, mode,
                                           changes.get("lock_days", bucket.lock_days) if mode else None))
        if _access_body(changes):
            info = admin_call(client.set_access, bucket.name, **_access_body(changes))
            bucket.acl, bucket.public_access_block = info["acl"], info["public_access_block"]
            bucket.object_ownership = info["ownership"] or ""
        bucket.save()
    return bucket


def bucket_access(bucket: Bucket) -> dict:
    """``{"policy": DOC|None, "cors": [RULE]|None}`` as the gateway holds them (set over S3 or
    through the plane); both None when the gateway does not answer."""
    try:
        client = admin_client(timeout=3)
        return {"policy": admin_call(client.get_policy, bucket.name),
                "cors": admin_call(client.get_cors, bucket.name)}
    except (GatewayUnavailable, GatewayRefused, NotFound) as exc:
        log.info("bucket %s: policy and CORS not read: %s", bucket.name, exc)
        return {"policy": None, "cors": None}


def set_bucket_policy(bucket: Bucket, policy: dict | None) -> dict | None:
    """Replace (None: remove) the bucket policy; the gateway validates it as PutBucketPolicy
    does (400 with its MalformedPolicy reason)."""
    return admin_call(admin_client().set_policy, bucket.name, policy)


def get_bucket_policy(bucket: Bucket) -> dict | None:
    return admin_call(admin_client().get_policy, bucket.name)


def set_bucket_cors(bucket: Bucket, rules: list | None) -> list | None:
    """Replace (None: remove) the CORS rules (S3's JSON shape), validated as PutBucketCors."""
    return admin_call(admin_client().set_cors, bucket.name, rules)


def get_bucket_cors(bucket: Bucket) -> list | None:
    return admin_call(admin_client().get_cors, bucket.name)


def delete_bucket(bucket: Bucket) -> None:
    """Delete an empty bucket (409 BucketNotEmpty otherwise)."""
    with transaction.atomic():
        bucket.delete()
        if bucket.workload_class != SAMPLES:
            transaction.on_commit(write_gateway_config)
        try:
            admin_call(admin_client().delete_bucket, bucket.name)
        except NotFound:
            pass  # already gone from the gateway (deleted over S3)
        except Conflict as exc:
            if exc.code == "BucketNotEmpty":
                raise Conflict(f"Bucket {bucket.name} is not empty: delete its objects (and their "
                               "versions) first.", code="BucketNotEmpty") from None
            raise


def refresh_usage(buckets=None) -> bool:
    """Record the gateway's usage figures on the rows; False if the gateway does not answer."""
    try:
        reported = {b["name"]: b for b in admin_client(timeout=3).list_buckets()}
    except (GatewayAdminError, GatewayUnavailable) as exc:
        log.info("bucket usage not refreshed: %s", exc)
        return False
    rows = [b for b in (buckets if buckets is not None else Bucket.objects.all()) if b.name in reported]
    for bucket in rows:
        _apply_info(bucket, reported[bucket.name])
    Bucket.objects.bulk_update(rows, ["used_bytes", "used_objects", "versioning", "usage_updated_at",
                                      *ACCESS_FIELDS, *PROTECTION_FIELDS], batch_size=500)
    return True


def apply_lifecycle() -> dict:
    """One pass of every bucket's lifecycle rules in the gateway, now; its counts
    (``transitioned``, ``transitioned_bytes``, ``expired``, ...). GatewayUnavailable when
    it does not answer."""
    gateway()
    return admin_call(admin_client(timeout=3600).apply_lifecycle)


def reconcile_buckets(push_quotas: bool = True) -> dict:
    """Make rows and gateway agree: import buckets made over S3, forget buckets deleted over
    S3, record usage and versioning, and (``push_quotas``) re-apply quotas, which only the
    plane sets."""
    gw = gateway()
    client = admin_client()
    reported = {b["name"]: b for b in admin_call(client.list_buckets)}
    summary = {"imported": [], "forgotten": [], "quota_fixed": []}
    rows = {b.name: b for b in Bucket.objects.filter(name__in=list(reported))}
    for name, info in sorted(reported.items()):
        quota = info.get("quota") or {}
        bucket = rows.get(name)
        if bucket is None:
            bucket = Bucket(name=name, owner=info.get("owner") or "", filesystem=gw.filesystem,
                            quota_bytes=quota.get("bytes"), quota_objects=quota.get("objects"))
            _apply_info(bucket, info)
            try:
                with transaction.atomic():
                    bucket.save()
            except IntegrityError:
                continue  # created through the API at this very moment: that request records it
            summary["imported"].append(name)
            continue
        if push_quotas and (quota.get("bytes"), quota.get("objects")) != (bucket.quota_bytes,
                                                                           bucket.quota_objects):
            admin_call(client.set_quota, name, bytes=bucket.quota_bytes, objects=bucket.quota_objects)
            summary["quota_fixed"].append(name)
        _apply_info(bucket, info)
        bucket.save()
    for bucket in Bucket.objects.exclude(name__in=list(reported)):
        summary["forgotten"].append(bucket.name)
        bucket.delete()
    return summary


def sync_for_listing() -> None:
    """Before a listing: show what the gateway holds (buckets made or deleted over S3, usage).
    Without a gateway, the rows as last recorded are shown."""
    try:
        reconcile_buckets(push_quotas=False)
    except GatewayUnavailable as exc:
        log.info("bucket list not refreshed: %s", exc.message)


def wait_until_serving(timeout: float = 30.0) -> dict:
    """Poll the health of the gateway `strata up` runs until it answers (after the launcher
    started it)."""
    client = GatewayAdminClient(admin_endpoint(), gateway().admin_token, timeout=2)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.health()
        except GatewayAdminError as err:
            if err.status != 0 or time.monotonic() > deadline:
                raise GatewayUnavailable(f"The S3 gateway at {client.endpoint} did not come up: "
                                         f"{err}; see log/s3.log in the data directory.") from None
        time.sleep(0.2)
