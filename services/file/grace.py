"""The plane's part in the NFS grace of a cluster's nodes (their Ganesha servers serve the
exports of Ceph pools together, members of one grace database: see
``services.file.runtime.grace`` and ``services.nodes.cluster.nfs_grace``).

- A node written down (``node_down``, 15 s without a heartbeat): :func:`start_grace` fences
  its CephFS clients (their MDS sessions evicted, which blocklists them: the capabilities its
  Ganesha held on files and directories would otherwise block every other node's clients
  touching them until the MDS's ``session_autoclose``, 300 s by default) and puts the
  cluster in grace for it (``ganesha-rados-grace start NODE``; the survivor that took its
  floating address over started it already, :mod:`services.file.takeover`): the survivors
  refuse new state (opens, locks) until :func:`release` gives its need up, at once. The
  fence is recorded (``fenced``): a node that was only paused (a hung host, a partition) and
  comes back has a blocklisted Ganesha, which its agent restarts with a fresh client when it
  sees the mark.
- A node removed from the cluster (``node_removed``): :func:`end_grace` gives up its need
  (``lift``) and its membership (``remove``), so grace ends (unless a node of that name
  joined again before the task ran).
- A node drained (``node_drained``): its Ganesha stops cleanly, and a clean stop puts the
  cluster in grace for its clients (Ganesha's ``rados_cluster`` does so on shutdown).
- Either way :func:`release` then gives up the node's need if it is still down or drained
  (a drained one once it reports Ganesha stopped), so grace ends and the survivors take new
  opens again. Why at once, not one grace period later: no survivor can take the node's
  clients' reclaims (``rados_cluster`` has no takeover: each node's client records are its
  own, and Ganesha says "Clustered rados backend does not support takeover!"), so a client
  that followed the node's address has its reclaims refused and opens anew whenever the grace
  ends; the locks its Ganesha held were CephFS locks of the session the fence just ended. A
  longer grace kept nothing for them and stopped every client's new opens on every node (up
  to ``nfs_grace_seconds``, 90 s by default, after the node was written down: every
  checkpoint save in the cluster waited). A node that comes back starts a grace of its own
  for its clients (they reclaim on it).

- A need nothing else would give up: a survivor that takes a node's floating address over
  after the plane already wrote that node down and lifted its need (the plane lost its
  heartbeats while keepalived still heard its adverts, then it died) starts the grace again,
  and no signal follows. :func:`release_stale`, every 10 s (``periodic.py``), gives up the
  need of every node whose last heartbeat is ``STALE_AFTER`` seconds old and is down (the
  plane's own fence and lift, above, are done by then: about 10 s after the node is written
  down), or drained with its Ganesha stopped, through :func:`release`. It asks Ceph nothing
  while no node is either, and one ``ganesha-rados-grace dump`` a run per node that is.

Each runs as a Celery task (:mod:`services.file.tasks`), retried every 5 s while the Ceph
cluster does not answer, so that a failure here never holds back the marking of other
nodes. What was done goes to the plane's log.
"""
import logging
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from services.file.runtime import NfsCluster
from services.file.runtime.grace import GraceDb
from services.nodes.public import NFS_GRACE_NAMESPACE, Node, fenced, nfs_grace_pool
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
    """Put the cluster in grace for the nodes ``names`` that are still down and members (dead
    servers); returns those it was started for. Raises CommandError when Ceph does not answer.

    Still down when this runs, not only when written down: the task is retried for ten
    minutes while Ceph does not answer, and a plane stopped or killed with it pending runs it
    when it starts again (Celery puts back what a worker held), so the node may have come back
    meanwhile; fencing it then would evict the sessions of a Ganesha that serves."""
    down = set(Node.objects.filter(name__in=names, state=Node.State.DOWN)
               .values_list("name", flat=True))
    back = [n for n in names if n not in down]
    if back:
        log.warning("file: node(s) %s no longer down: no NFS grace started for them",
                    ", ".join(back))
    db = grace_db() if down else None
    if db is None:
        return []
    members = db.dump().members
    dead = [n for n in names if n in members and n in down]
    if dead:
        for name in dead:                 # their files' capabilities free for the others
            evicted = storage.evict_node_clients(name)
            if evicted:
                fenced(name)              # its agent restarts Ganesha once it is back
                log.warning("file: node %s down: its CephFS sessions evicted (%s)", name,
                            ", ".join(evicted))
        db.start(*dead)
        log.warning("file: node(s) %s down: NFS grace started for their clients "
                    "(the other servers enforce it)", ", ".join(dead))
    return dead


def end_grace(name: str) -> bool:
    """Node ``name`` left the cluster: its need of grace is given up and it is a member no
    more; True if it was one. Raises CommandError when Ceph does not answer.

    Nothing when a node of that name is in the cluster when this runs (the task is retried
    while Ceph does not answer, and runs late after a plane's restart): it joined again
    meanwhile, and its Ganesha is a member of its own."""
    if Node.objects.filter(name=name).exists():
        log.warning("file: node %s is in the cluster again: its NFS grace membership kept",
                    name)
        return False
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


def release_ready(name: str) -> bool:
    """Whether node ``name``'s need of grace may be given up now: False only while it is
    drained (not down) and its Ganesha still runs (ask again)."""
    node = Node.objects.filter(name=name).first()
    return not (_out_of_service(node) and node.state != Node.State.DOWN
                and (node.daemons or {}).get("ganesha"))


STALE_AFTER = 30.0      # seconds since a down node's last heartbeat: its fence and lift are done


def release_stale() -> list[str]:
    """Give up the need of grace of every node down for ``STALE_AFTER`` seconds, or drained
    with its Ganesha stopped, that still has one (see the module's docstring); their names.
    Raises CommandError when Ceph does not answer."""
    cutoff = timezone.now() - timedelta(seconds=STALE_AFTER)
    out = Node.objects.filter(Q(state=Node.State.DOWN, last_heartbeat__lt=cutoff)
                              | Q(schedule=Node.Schedule.DRAINED))
    return [node.name for node in out if release_ready(node.name) and release(node.name)]


def release(name: str) -> bool:
    """Give up node ``name``'s need of grace, if it is still down or drained (no survivor can
    take its clients' reclaims); True if it needed it. Raises CommandError when
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
    log.warning("file: node %s %s: NFS grace lifted for it (no survivor can take its clients' "
                "reclaims: they open anew)", name,
                node.state if node.state == Node.State.DOWN else node.schedule)
    return True
