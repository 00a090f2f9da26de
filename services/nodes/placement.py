"""What each node serves: placement follows the pools.

- A resource (file system, volume) on a local pool (btrfs, directory, spdk) is served only by
  the node that holds the pool's disks (``Pool.node``), when that node runs the resource's
  service.
- A resource on a Ceph pool is served by every node assigned its service (and not drained):
  every such node is an entry to it. The model has no per-resource choice of nodes.
- The node of `strata up` (single host, ``Node.local``) runs every service.

A node agent's processes (``STRATA_NODE_AGENT``) apply only what is placed on their node
(:func:`served_here`); the plane and `strata up` serve everything they hold.

When what the services serve changes (an export, share, SMB user, block export, host or
host group saved or deleted; a pool made or deleted), every node's ``revision`` is bumped: the
heartbeat's answer carries it, and an agent whose revision moved runs its services' reconcile
again. Saves that only record an outcome (state, error, what was applied) bump nothing, so a
node's reconcile never wakes the others.
"""
import logging

from django.apps import apps
from django.conf import settings
from django.db.models import F
from django.db.models.signals import post_delete, post_save

from services.nodes.models import Node
from services.storage.models import FileSystem, Pool, Volume

log = logging.getLogger(__name__)

SHARED = ("ceph",)                    # pool drivers whose resources any node can serve
# the service whose daemons serve each kind of resource
SERVICE_OF = {"filesystem": "file", "volume": "block"}
# the rows whose changes a node's daemons must follow (app_label.Model). Not the object
# service's buckets: every node's gateway reads them from RADOS (RADOS store; its config's
# changes move the revision themselves), and its periodic usage reconcile saves every bucket
# (it would wake every node every 5 minutes)
WATCHED = {"file.NfsExport", "file.SmbShare", "file.SmbUser", "block.BlockExport",
           "block.Host", "block.HostGroup"}
# fields that record an outcome, not a wish
OUTCOME_FIELDS = {"state", "error", "applied", "updated_at", "connection", "used_bytes",
                  "usage_bytes", "usage_objects", "usage_updated_at"}


def is_shared(pool: Pool) -> bool:
    return pool.driver in SHARED


def serves_service(node: Node, service: str) -> bool:
    """Whether ``node`` runs ``service``'s daemons (a drained node runs none)."""
    if node.local:
        return True
    return service in node.services and node.schedule != Node.Schedule.DRAINED


def nodes_serving(pool: Pool, service: str, nodes=None) -> list[str]:
    """Names of the nodes that serve ``service``'s resources on ``pool``."""
    nodes = list(Node.objects.all()) if nodes is None else nodes
    if is_shared(pool):
        return [n.name for n in nodes if serves_service(n, service)]
    return [n.name for n in nodes if n.name == pool.node and serves_service(n, service)]


def served_here(pool: Pool, service: str) -> bool:
    """Whether this process's node serves ``service``'s resources on ``pool``: always on
    the plane and under `strata up`; on a cluster node, as :func:`nodes_serving` says."""
    if not settings.STRATA_NODE_AGENT:
        return True
    name = settings.STRATA_NODE_NAME
    if not is_shared(pool):
        return pool.node == name
    node = Node.objects.filter(name=name).first()
    return node is not None and serves_service(node, service)


def serves(node: Node) -> dict:
    """What ``node`` serves: ``{"filesystems": [...], "volumes": [...]}`` (names)."""
    out = {}
    for kind, model in (("filesystem", FileSystem), ("volume", Volume)):
        service = SERVICE_OF[kind]
        if not serves_service(node, service):
            out[f"{kind}s"] = []
            continue
        rows = model.objects.select_related("pool")
        out[f"{kind}s"] = [r.name for r in rows
                           if is_shared(r.pool) or r.pool.node == node.name or node.local]
    return out


def entries() -> dict:
    """Per resource, the nodes that serve it: ``{"filesystems": [{"name", "pool", "driver",
    "nodes"}], "volumes": [...], "pools": [...]}``; per pool, the nodes that would serve a
    new file system (``file``) or volume (``block``) on it (the CSI driver's topology)."""
    nodes = list(Node.objects.all())
    local = [n.name for n in nodes if n.local]
    out = {"pools": [
        {"name": p.name, "driver": p.driver,
         **{service: nodes_serving(p, service, nodes) or local
            for service in SERVICE_OF.values()}}
        for p in Pool.objects.order_by("name")]}
    for kind, model in (("filesystem", FileSystem), ("volume", Volume)):
        service = SERVICE_OF[kind]
        out[f"{kind}s"] = [
            {"name": r.name, "pool": r.pool.name, "driver": r.pool.driver,
             "nodes": nodes_serving(r.pool, service, nodes) or local}
            for r in model.objects.select_related("pool")]
    return out


# --- the revision: nodes follow changes ------------------------------------------------------

def bump() -> None:
    """Every node reconciles at its next heartbeat."""
    Node.objects.update(revision=F("revision") + 1)


def _changed(sender, instance, **kwargs):
    fields = kwargs.get("update_fields")
    if fields and set(fields) <= OUTCOME_FIELDS:
        return
    if settings.STRATA_NODE_AGENT:
        return          # a node records outcomes; what to serve comes from the plane
    bump()


def _pool_changed(sender, instance, created=False, **kwargs):
    if created or kwargs.get("signal") is post_delete:
        bump()


def connect() -> None:
    """Receivers on the watched rows (by label: the services are not imported here)."""
    for label in sorted(WATCHED):
        try:
            model = apps.get_model(label)
        except LookupError:       # a service not installed
            continue
        post_save.connect(_changed, sender=model, dispatch_uid=f"nodes.placement.s.{label}")
        post_delete.connect(_changed, sender=model, dispatch_uid=f"nodes.placement.d.{label}")
    post_save.connect(_pool_changed, sender=Pool, dispatch_uid="nodes.placement.pool_saved")
    post_delete.connect(_pool_changed, sender=Pool, dispatch_uid="nodes.placement.pool_deleted")
