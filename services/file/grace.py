"""The plane's part in the NFS grace of a cluster's nodes (their Ganesha servers serve the
exports of Ceph pools together, members of one grace database: see
``services.file.runtime.grace`` and ``services.nodes.cluster.nfs_grace``).

- A node written down (``node_down``, 15 s without a heartbeat): :func:`start_grace` fences
  its CephFS clients (their MDS sessions evicted, which blocklists them: the capabilities its
  Ganesha held on files and directories would otherwise block every other node's clients
  touching them until the MDS's ``session_autoclose``, 300 s by default) and puts the
  cluster in grace for it (``ganesha-rados-grace start NODE``), so the survivors refuse new
  state while the dead node's clients reclaim theirs on a survivor.
- A node removed from the cluster (``node_removed``): :func:`end_grace` gives up its need
  (``lift``) and its membership (``remove``), so grace ends.
- A node drained (``node_drained``): its Ganesha stops cleanly, and a clean stop puts the
  cluster in grace for its clients (Ganesha's ``rados_cluster`` does so on shutdown).
- Either way, the node's clients then get one grace period (the node's
  ``nfs_grace_seconds``; for a drained node, counted once it reports Ganesha stopped) to
  reclaim on the others, and :func:`release` gives up its need if it is still down or
  drained, so grace ends and the survivors take new opens again. Without it the cluster
  stayed in grace, every survivor refusing new opens, until the node served again or was
  removed. A node that comes back starts a grace of its own for its clients.

Each runs as a Celery task (:mod:`services.file.tasks`), retried every 5 s while the Ceph
cluster does not answer, so that a failure here never holds back the marking of other
nodes. What was done goes to the plane's log.
"""
import logging

from services.file.runtime import NfsCluster
from services.file.runtime.grace import GraceDb
from services.nodes.public import NFS_GRACE_NAMESPACE, Node, nfs_grace_pool
from services.storage import service as storage

log = logging.getLogger(__name__)


def grace_db() -> GraceDb | None:
    """The cluster's grace database, reached with the Ceph pool's own client (the plane's);
    None when no Ceph pool holds file systems (no node serves in a cluster)."""
    pool = nfs_grace_pool()
    if pool is None:
        return None
    return GraceDb(NfsCluster(conf=pool.ceph.get("conf") or "",
                              client=pool.ceph.get("client") or "admin",
                              pool=storage.rados_pool(pool), namespace=NFS_GRACE_NAMESPACE,
                              nodeid="plane"))


def start_grace(names: list[str]) -> list[str]:
    """Put the cluster in grace for the nodes ``names`` that are members (dead servers);
    returns those it was started for. Raises CommandError when Ceph does not answer."""
    db = grace_db()
    if db is None:
        return []
    members = db.dump().members
    dead = [n for n in names if n in members]
    if dead:
        for name in dead:                 # their files' capabilities free for the others
            fenced = storage.evict_node_clients(name)
            if fenced:
                log.warning("file: node %s down: its CephFS sessions evicted (%s)", name,
                            ", ".join(fenced))
        db.start(*dead)
        log.warning("file: node(s) %s down: NFS grace started for their clients "
                    "(the other servers enforce it)", ", ".join(dead))
    return dead


def end_grace(name: str) -> bool:
    """Node ``name`` left the cluster: its need of grace is given up and it is a member no
    more; True if it was one. Raises CommandError when Ceph does not answer."""
    db = grace_db()
    if db is None or name not in db.dump().members:
        return False
    db.lift(name)
    db.remove(name)
    log.warning("file: node %s removed: its NFS grace membership ended", name)
    return True


def _out_of_service(node) -> bool:
    return node is not None and (node.state == Node.State.DOWN
                                 or node.schedule == Node.Schedule.DRAINED)


def release_wait(name: str) -> float | None:
    """Seconds to wait before node ``name``'s need of grace is given up: its grace period,
    once it is down, or drained with its Ganesha stopped; 0 when there is nothing to do
    (gone, or serving again); None while a drained node's Ganesha still runs (ask again)."""
    node = Node.objects.filter(name=name).first()
    if not _out_of_service(node):
        return 0
    if node.state != Node.State.DOWN and (node.daemons or {}).get("ganesha"):
        return None
    return float((node.options or {}).get("nfs_grace_seconds") or 90)


def release(name: str) -> bool:
    """Give up node ``name``'s need of grace, if it is still down or drained (its clients had
    their grace period to reclaim elsewhere); True if it needed it. Raises CommandError when
    Ceph does not answer."""
    node = Node.objects.filter(name=name).first()
    if not _out_of_service(node):
        return False                  # removed (end_grace did it), or back: its own grace
    db = grace_db()
    if db is None:
        return False
    flags = db.dump().members.get(name)
    if flags is None or "N" not in flags:
        return False
    db.lift(name)
    log.warning("file: node %s %s: its NFS clients had their grace period; grace lifted for "
                "it", name, node.state if node.state == Node.State.DOWN else node.schedule)
    return True
