"""The plane's side of the cluster: join tokens, joining, heartbeats, down detection, cordon,
drain and remove. Raises the domain errors of ``plumbing.errors``; the API maps them.

A node heartbeats every :data:`HEARTBEAT_EVERY` seconds; one whose last heartbeat is older
than :data:`DOWN_AFTER` (three missed beats) is down, and its daemons are then reported as
``unknown`` (what it last said is kept, but no longer vouched for). Resources on local pools
(btrfs, directory, spdk) belong to the node that holds the disks (``Pool.node``); resources on
Ceph pools can be served by any node, so a drain moves the node's services to other up
nodes, and refuses (409 ``holds_local_resources``) while the node holds local pools.
"""
import hashlib
import ipaddress
import logging
import re
import secrets
from datetime import timedelta
from urllib.parse import quote, urlparse, urlunparse

from django.conf import settings
from django.db import connection, transaction
from django.dispatch import Signal
from django.utils import timezone

from dataplane.errors import DataplaneError
from plumbing.errors import Conflict, Forbidden, Invalid, NotFound
from services.nodes.models import JoinToken, Node, NodeCredential
from services.nodes.placement import SHARED, bump, serves_service
from services.storage.models import FileSystem, Pool, Volume

log = logging.getLogger(__name__)

HEARTBEAT_EVERY = 5.0                 # seconds between an agent's heartbeats
DOWN_AFTER = 3 * HEARTBEAT_EVERY      # no heartbeat for this long: the node is down
DEFAULT_TOKEN_TTL = 3600
MAX_TOKEN_TTL = 7 * 24 * 3600
# the API's own words under /nodes/
RESERVED = {"join", "tokens", "heartbeat", "self", "placement"}
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")

node_down = Signal()        # names=[...]: nodes just written down (services.nodes.public)
node_up = Signal()          # name=...: a node that was down heartbeats again (same)
node_removed = Signal()     # name=...: a node taken out of the cluster (same)
node_drained = Signal()     # name=...: a node drained, its services moved (same)
# the RADOS namespace of the NFS servers' grace database, in the Ceph pool's own RADOS pool
NFS_GRACE_NAMESPACE = "strata-nfs-grace"


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def local_node_name() -> str:
    """This host's node name: ``STRATA_NODE_NAME``, else the host name (lower case)."""
    return settings.STRATA_NODE_NAME


# --- join tokens -----------------------------------------------------------------------------

def create_join_token(ttl: int | None = None) -> tuple[str, JoinToken]:
    """A one-use join token valid for ``ttl`` seconds (default an hour); returns the key
    (kept nowhere by the plane) and its row."""
    ttl = DEFAULT_TOKEN_TTL if ttl is None else ttl
    if not 1 <= int(ttl) <= MAX_TOKEN_TTL:
        raise Invalid(f"ttl: between 1 and {MAX_TOKEN_TTL} seconds", code="invalid")
    key = secrets.token_hex(20)
    row = JoinToken.objects.create(digest=digest_of(key), prefix=key[:8],
                                   expires_at=timezone.now() + timedelta(seconds=int(ttl)))
    return key, row


def _take_token(key: str, name: str) -> None:
    """Use up the join token ``key`` for node ``name`` (inside the caller's transaction)."""
    row = JoinToken.objects.select_for_update().filter(digest=digest_of(key or "")).first()
    if row is None:
        raise Forbidden("The join token is not one this plane made; make one with "
                        "`strata node token create`.", code="join_token_invalid")
    if row.used_at is not None:
        raise Forbidden(f"The join token was already used (by node {row.used_by}, "
                        f"{row.used_at:%Y-%m-%d %H:%M:%S} UTC); a join token is good for one "
                        "node: make another.", code="join_token_used")
    if row.expires_at <= timezone.now():
        raise Forbidden(f"The join token expired at {row.expires_at:%Y-%m-%d %H:%M:%S} UTC; "
                        "make another.", code="join_token_expired")
    row.used_at, row.used_by = timezone.now(), name
    row.save(update_fields=["used_at", "used_by"])


# --- joining ---------------------------------------------------------------------------------

def _check_name(name: str) -> None:
    if not NAME_RE.match(name or "") or name in RESERVED:
        raise Invalid("name: 1-63 characters: lower-case letters, digits, '.', '_' and '-', "
                      f"starting with a letter or digit, and not one of {sorted(RESERVED)}")


def _issue_credential(node: Node) -> str:
    key = secrets.token_hex(20)
    NodeCredential.objects.filter(node=node).delete()
    NodeCredential.objects.create(node=node, digest=digest_of(key), prefix=key[:8])
    return key


def join(key: str, name: str, management_address: str, data_address: str,
         version: str = "") -> tuple[Node, dict]:
    """Register node ``name`` with the join token ``key``; returns the node and what it
    needs (its credential, the database and Redis URLs, the sealing key), shown this once."""
    _check_name(name)
    for field, value in (("management_address", management_address),
                         ("data_address", data_address)):
        if not value or len(value) > 255 or any(c.isspace() for c in value):
            raise Invalid(f"{field}: an address (host name or IP) is required")
    with transaction.atomic():
        _take_token(key, name)
        if Node.objects.filter(name=name).exists():
            raise Conflict(f"A node named {name} is already in the cluster (another host "
                           "holds that name); pick another name, or remove that node first.",
                           code="node_exists")
        node = Node.objects.create(name=name, management_address=management_address,
                                   data_address=data_address, version=version[:64])
        credential = _issue_credential(node)
        _peers_changed()
    database_url, role = node_database_url(name)
    if role:
        Node.objects.filter(pk=node.pk).update(db_role=role)
    return node, {"name": name, "credential": credential, "database_url": database_url,
                  "redis_url": node_redis_url(), "secret_key": settings.SECRET_KEY}


def register_local(name: str, address: str) -> str:
    """The node of `strata up` (single host): its row (made once, addresses kept current)
    and a new credential for its heartbeats, returned."""
    with transaction.atomic():
        node, _ = Node.objects.update_or_create(
            name=name, defaults={"management_address": address, "data_address": address,
                                 "local": True})
        return _issue_credential(node)


def node_for(key: str) -> Node | None:
    """The node whose credential is ``key``, or None (never joined, or removed)."""
    row = NodeCredential.objects.select_related("node").filter(digest=digest_of(key or "")).first()
    return row.node if row else None


# --- database and Redis for the nodes ---------------------------------------------------------

def _url_of_database() -> str:
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        return ""
    auth = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def _role_name(name: str) -> str:
    """``<database>_node_<name>``: one PostgreSQL server may hold several clusters."""
    database = settings.DATABASES["default"]["NAME"]
    return re.sub(r"[^a-z0-9_]", "_", f"{database}_node_{name}".lower())[:63]


def node_database_url(name: str) -> tuple[str, str]:
    """The database URL node ``name`` uses, and its own PostgreSQL role ("" when none).

    On PostgreSQL the node gets its own login role with a random password, a member of the
    plane's role (same privileges, so the services' code runs unchanged on the node), dropped
    when the node is removed: a removed node's database password stops working. When the
    plane's role may not create roles, or is a superuser (a member could SET ROLE to it),
    the node gets the plane's URL (said in the log).
    ``STRATA_NODE_DATABASE_URL`` names the address the nodes reach (the plane may use a
    loopback one)."""
    url = settings.STRATA_NODE_DATABASE_URL or _url_of_database()
    if not url:
        return "", ""
    role, password = _role_name(name), secrets.token_urlsafe(24)
    plane_role = settings.DATABASES["default"]["USER"]
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            if cur.fetchone()[0]:
                # a member of a superuser role may SET ROLE to it: never hand that to a node
                log.warning("node %s: the plane connects as a superuser; the node gets the "
                            "plane's database URL (give the plane a role of its own with "
                            "CREATEROLE to have one role per node)", name)
                return url, ""
            cur.execute(f'DROP ROLE IF EXISTS "{role}"')
            cur.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD %s IN ROLE \"{plane_role}\"",
                        [password])
    except Exception as exc:   # no CREATEROLE: the plane's own credential, said
        log.warning("node %s: no database role of its own (%s); it uses the plane's", name,
                    exc)
        return url, ""
    u = urlparse(url)
    netloc = f"{quote(role)}:{quote(password)}@{u.hostname}" + (f":{u.port}" if u.port else "")
    return urlunparse(u._replace(netloc=netloc)), role


def _drop_role(role: str) -> None:
    if not role:
        return
    with connection.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    [role])
        cur.execute(f'DROP ROLE IF EXISTS "{role}"')


def node_redis_url() -> str:
    """The broker URL the nodes use (``STRATA_NODE_REDIS_URL``, else the plane's)."""
    return settings.STRATA_NODE_REDIS_URL or settings.CELERY_BROKER_URL


# --- heartbeats and down detection ------------------------------------------------------------

def heartbeat(node: Node, daemons: dict, version: str = "") -> dict:
    """Record a heartbeat; answer what the node should run (its services and their
    options) and how it is scheduled."""
    if not isinstance(daemons, dict):
        raise Invalid("daemons: an object {name: {state, ...}}")
    fields = {"last_heartbeat": timezone.now(), "state": Node.State.UP,
              "daemons": {str(k)[:64]: v for k, v in list(daemons.items())[:64]}}
    if version:
        fields["version"] = version[:64]
    was_down = node.state == Node.State.DOWN or (node.state == Node.State.UP and is_down(node))
    Node.objects.filter(pk=node.pk).update(**fields)
    if was_down:
        for receiver, answer in node_up.send_robust(sender=Node, name=node.name):
            if isinstance(answer, Exception):
                log.error("node %s up again: %s failed: %s", node.name,
                          getattr(receiver, "__qualname__", receiver), answer)
    options = daemon_options(node)
    grace = nfs_grace(node)
    if grace:
        options["nfs_cluster"] = grace
    return {"name": node.name, "services": node.services, "options": options,
            "schedule": node.schedule, "heartbeat_every": HEARTBEAT_EVERY,
            "revision": node.revision,
            "fenced": node.fenced_at.isoformat() if node.fenced_at else ""}


def fenced(name: str) -> None:
    """Node ``name``'s CephFS clients were fenced (evicted, so blocklisted) while it was
    down: recorded, so that its agent, once it answers again, restarts its file daemons with
    fresh clients (a blocklisted one serves nothing until then)."""
    Node.objects.filter(name=name).update(fenced_at=timezone.now())


def daemon_options(node: Node) -> dict:
    """The options ``node``'s daemons start with (as `strata up`'s): its addresses, then what
    the plane set for it."""
    return {"host": node.management_address, "data_host": node.data_address, **node.options}


def s3_gateways() -> list[dict]:
    """``[{"name", "options"}]``: the nodes whose S3 gateway runs now (up, assigned
    ``object``, its daemon reported running), with their daemons' options: the plane calls
    their admin interface (services.object's ``find_node_gateways``)."""
    return [{"name": n.name, "options": daemon_options(n)}
            for n in Node.objects.filter(local=False, state=Node.State.UP)
            if not is_down(n) and "object" in n.services
            and (n.daemons.get("s3") or {}).get("state") == "running"]


def nfs_grace_pool() -> Pool | None:
    """The Ceph pool whose RADOS pool holds the grace database of every node's Ganesha: the
    first (by name) Ceph pool with file systems. One database for the whole cluster, since
    one Ganesha serves the exports of every Ceph pool (of one Ceph cluster)."""
    return (Pool.objects.filter(driver__in=SHARED, filesystems__isnull=False)
            .order_by("name").distinct().first())


def nfs_grace(node: Node) -> dict | None:
    """Where ``node``'s Ganesha is a member of the NFS grace database (``{"pool",
    "rados_pool", "namespace", "nodeid", "serial"}``: ``serial`` sets its Ganesha epoch
    apart from the other nodes'), when it serves file systems of Ceph pools;
    None on the single host and on nodes without the file service (they serve alone)."""
    from services.storage import service as storage   # noqa: PLC0415  (as in ceph_files)
    if node.local or not serves_service(node, "file"):
        return None
    pool = nfs_grace_pool()
    if pool is None:
        return None
    try:
        rados_pool = storage.rados_pool(pool)
    except DataplaneError as exc:
        log.warning("node %s: no NFS grace database (pool %s: %s)", node.name, pool.name, exc)
        return None
    return {"pool": pool.name, "rados_pool": rados_pool, "namespace": NFS_GRACE_NAMESPACE,
            "nodeid": node.name, "serial": node.pk}


def ceph_files(node: Node) -> dict:
    """What the node's daemons need to open each Ceph pool (``{"pools": {name: {"client",
    "conf", "keyring", "filesystem", "root"}}}``, the texts of the files): the node's own
    cephx key for the pool (revoked by :func:`remove`). A pool whose files cannot be read
    is listed under ``errors``."""
    from services.storage import service as storage   # noqa: PLC0415  (the plane's side only)
    pools, errors = {}, {}
    for pool in Pool.objects.filter(driver__in=SHARED):
        try:
            pools[pool.name] = storage.ceph_client_files(pool, node.name)
        except DataplaneError as exc:
            errors[pool.name] = str(exc)
    if errors:
        log.warning("node %s: Ceph client files not handed over: %s", node.name, errors)
    return {"pools": pools, "errors": errors}


def s3_gateway_config(node: Node) -> dict:
    """The gateway config of ``node`` (assigned ``object``, RADOS store): see
    ``services.object.bootstrap.node_gateway_config``; Conflict when it may not serve S3."""
    from services.object import public as s3   # noqa: PLC0415  (the plane's side only)
    if not serves_service(node, "object"):
        raise Conflict(f"Node {node.name} is not assigned the object service.",
                       code="not_assigned")
    return {"config": s3.node_gateway_config(node.name, node_redis_url())}


def refuse_services(node: Node, services: list[str]) -> None:
    """Conflict when ``services`` newly gives ``node`` a service it cannot run: ``object``
    while the S3 buckets are in the file store."""
    if "object" in services and "object" not in node.services and not node.local:
        from services.object import public as s3   # noqa: PLC0415
        s3.refuse_on_nodes(node.name)


def is_down(node: Node, now=None) -> bool:
    """True when the node's heartbeats stopped (older than DOWN_AFTER), also before the
    periodic task wrote it down."""
    if node.last_heartbeat is None:
        return node.state == Node.State.DOWN
    return ((now or timezone.now()) - node.last_heartbeat).total_seconds() > DOWN_AFTER


def state_of(node: Node, now=None) -> str:
    return Node.State.DOWN if is_down(node, now) else node.state


def daemons_of(node: Node, now=None) -> dict:
    """The daemons as last reported; all ``unknown`` while the node is down."""
    if not is_down(node, now):
        return node.daemons
    return {name: {**d, "state": "unknown", "reported": d.get("state")}
            for name, d in node.daemons.items()}


def mark_down() -> list[str]:
    """Write down every node whose last heartbeat is older than DOWN_AFTER (the periodic
    task, every HEARTBEAT_EVERY seconds); returns their names."""
    cutoff = timezone.now() - timedelta(seconds=DOWN_AFTER)
    stale = list(Node.objects.filter(state=Node.State.UP, last_heartbeat__lt=cutoff)
                 .values_list("name", flat=True))
    if stale:
        Node.objects.filter(name__in=stale, last_heartbeat__lt=cutoff).update(
            state=Node.State.DOWN)
        log.warning("node(s) down (no heartbeat for %.0f s): %s", DOWN_AFTER, ", ".join(stale))
        for receiver, answer in node_down.send_robust(sender=Node, names=stale):
            if isinstance(answer, Exception):
                log.error("node(s) %s down: %s failed: %s", ", ".join(stale),
                          getattr(receiver, "__qualname__", receiver), answer)
    return stale


# --- cordon, drain, remove ---------------------------------------------------------------------

def get(name: str) -> Node:
    node = Node.objects.filter(name=name).first()
    if node is None:
        raise NotFound(f"No node named {name}.")
    return node


def local_resources(node: Node) -> dict:
    """What lives on the node's own disks and cannot move: its local pools and their file
    systems and volumes."""
    pools = list(Pool.objects.filter(node=node.name).exclude(driver__in=SHARED)
                 .values_list("name", flat=True))
    return {"pools": pools,
            "filesystems": list(FileSystem.objects.filter(pool__name__in=pools)
                                .values_list("name", flat=True)),
            "volumes": list(Volume.objects.filter(pool__name__in=pools)
                            .values_list("name", flat=True))}


def _refuse_local(node: Node, what: str) -> None:
    held = local_resources(node)
    if held["pools"]:
        named = "; ".join(f"{k}: {', '.join(v)}" for k, v in held.items() if v)
        raise Conflict(f"Node {node.name} holds resources on its local disks, which cannot "
                       f"move to another node ({named}); {what} is refused. Delete them or "
                       "move them to a Ceph pool first.", code="holds_local_resources")


def set_schedule(name: str, schedule: str) -> Node:
    """Cordon (takes nothing new; keeps what it serves) or uncordon a node."""
    node = get(name)
    if node.schedule != schedule:
        node.schedule = schedule
        node.save(update_fields=["schedule"])
        bump()          # a node made active again takes its floating address back
    return node


def drain(name: str) -> dict:
    """Move what can move off the node: each service it runs goes to an up, active node
    that does not run it yet (the one with the fewest services); the node is then drained.
    Refused (409) while the node holds local pools, or when no other node can take over."""
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=name).first()
        if node is None:
            raise NotFound(f"No node named {name}.")
        _refuse_local(node, "draining it")
        others = [n for n in Node.objects.select_for_update().exclude(pk=node.pk)
                  .filter(schedule=Node.Schedule.ACTIVE) if not is_down(n)
                  and n.state == Node.State.UP]
        moved = {}
        for service in node.services:
            if any(service in n.services for n in others):
                moved[service] = next(n.name for n in others if service in n.services)
                continue
            if not others:
                raise Conflict(f"No other node is up and active to take over {service} from "
                               f"{node.name}; join or uncordon one first.",
                               code="no_node_to_take_over")
            target = min(others, key=lambda n: (len(n.services), n.name))
            target.services = target.services + [service]
            target.save(update_fields=["services"])
            moved[service] = target.name
        node.services, node.schedule = [], Node.Schedule.DRAINED
        node.save(update_fields=["services", "schedule"])
        bump()          # its floating address goes to another node (plumbing.keepalived)
    for receiver, answer in node_drained.send_robust(sender=Node, name=name):
        if isinstance(answer, Exception):
            log.error("node %s drained: %s failed: %s", name,
                      getattr(receiver, "__qualname__", receiver), answer)
    return {"name": node.name, "schedule": node.schedule, "moved": moved}


def remove(name: str) -> dict:
    """Take the node out of the cluster: its credential, database role and cephx keys
    revoked at once.
    Refused while it holds local pools, or still serves something (drain it first)."""
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(name=name).first()
        if node is None:
            raise NotFound(f"No node named {name}.")
        _refuse_local(node, "removing it")
        if node.services and node.schedule != Node.Schedule.DRAINED:
            raise Conflict(f"Node {name} still serves {', '.join(node.services)}; drain it "
                           "first (`strata node drain`).", code="not_drained")
        role = node.db_role
        node.delete()   # its credential with it
        _peers_changed()
    _drop_role(role)
    from services.storage import service as storage   # noqa: PLC0415  (as in ceph_files)
    storage.revoke_node_keys(name)
    for receiver, answer in node_removed.send_robust(sender=Node, name=name):
        if isinstance(answer, Exception):
            log.error("node %s removed: %s failed: %s", name,
                      getattr(receiver, "__qualname__", receiver), answer)
    return {"name": name, "removed": True}


# --- floating data addresses (keepalived on the nodes: plumbing.keepalived) -------------------

def validate_floating_address(value, node: Node | None) -> str:
    """``value`` as ``A.B.C.D/P`` ("" for none): an IPv4 host address with its prefix, held
    by no other node (as floating or data address). Raises Invalid naming the field."""
    value = (value or "").strip()
    if not value:
        return ""
    try:
        address = ipaddress.IPv4Interface(value)
    except ValueError:
        address = None
    if address is None or "/" not in value:
        raise Invalid("floating_address: an IPv4 address with its prefix length, e.g. "
                      "10.0.0.101/24")
    ip = address.ip
    if ip.is_loopback or ip.is_multicast or ip.is_unspecified or ip.is_link_local or \
            (address.network.prefixlen < 31 and ip in (address.network.network_address,
                                                      address.network.broadcast_address)):
        raise Invalid(f"floating_address: {value} is not a usable host address")
    value = str(address)
    others = Node.objects.exclude(pk=node.pk) if node is not None else Node.objects.all()
    taken = others.filter(floating_address__startswith=f"{ip}/").first() or \
        others.filter(data_address=str(ip)).first() or \
        others.filter(management_address=str(ip)).first()
    if taken is not None:
        raise Invalid(f"floating_address: {ip} is already node {taken.name}'s address; a "
                      "floating address belongs to one node")
    return value


def _peers_changed() -> None:
    """A node joined or left: when the cluster has floating addresses, every node renders its
    keepalived configuration again (the revision moves)."""
    if Node.objects.exclude(floating_address="").exists():
        bump()


def set_floating_address(node: Node, value: str) -> None:
    """Give ``node`` its floating address ("" takes it away); every node follows."""
    if node.floating_address != value:
        node.floating_address = value
        node.save(update_fields=["floating_address"])
        bump()


def vrrp_members() -> list[dict]:
    """Every node of the cluster (not the single host of `strata up`) as keepalived's
    configuration needs it: ``{"name", "data_address", "floating_address", "drained"}``, by
    name."""
    return [{"name": n, "data_address": d, "floating_address": f,
             "drained": s == Node.Schedule.DRAINED} for n, d, f, s in
            Node.objects.filter(local=False).order_by("name")
            .values_list("name", "data_address", "floating_address", "schedule")]


def validate_services(services) -> list[str]:
    known = set(settings.STRATA_NODE_SERVICES)
    if not isinstance(services, list) or not all(isinstance(s, str) for s in services):
        raise Invalid("services: a list of service names")
    unknown = sorted(set(services) - known)
    if unknown:
        raise Invalid(f"services: unknown {', '.join(unknown)} (one of {sorted(known)})")
    return list(dict.fromkeys(services))
