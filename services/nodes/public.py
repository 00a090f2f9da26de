"""What other services may use of the cluster's nodes (they import nothing else of it).

- :func:`served_here`: whether this process's node serves a service's resources on a pool.
- ``node_down``: sent (``names``: the nodes just written down) by the periodic task once a
  node's heartbeats stopped for ``DOWN_AFTER`` seconds; what a dead node served moves on.
- ``node_up``: sent (``name``) by the heartbeat of a node that was down.
- ``node_removed``: sent (``name``) once a node was taken out of the cluster.
- ``node_drained``: sent (``name``) once a node was drained (its services moved to others).
- :func:`fenced`: a node's CephFS clients were fenced (its agent restarts its file daemons).
- :func:`nfs_grace_pool`, ``NFS_GRACE_NAMESPACE``: where the nodes' Ganesha servers keep
  their grace database (the Ceph pool's RADOS pool, that namespace).
- :func:`bump`: every node reconciles at its next heartbeat (for a change the placement's
  receivers do not see, such as a path moved by a failover, saved as an outcome).
- :func:`nodes_serving`: the nodes (rows) that serve a service's resources on a pool.
- :func:`serving_nodes`, :func:`node_is_up`: the nodes that are up, take new work and run a
  service's daemon; whether one node is up.
"""
from services.nodes.cluster import (NFS_GRACE_NAMESPACE, fenced, is_down, nfs_grace_pool,
                                    node_down, node_drained, node_removed, node_up)
from services.nodes.models import Node
from services.nodes.placement import bump, served_here
from services.nodes.placement import nodes_serving as _names_serving

__all__ = ["served_here", "fenced", "node_down", "node_up", "node_removed", "node_drained", "bump",
           "serving_nodes", "node_is_up", "nodes_serving", "nfs_grace_pool", "NFS_GRACE_NAMESPACE", "Node"]


def serving_nodes(service: str, daemon: str) -> list:
    """Nodes (not the single host of `strata up`) that are up, active, assigned ``service``
    and report ``daemon`` running, by name."""
    return [n for n in Node.objects.filter(local=False, state=Node.State.UP,
                                           schedule=Node.Schedule.ACTIVE)
            if not is_down(n) and service in n.services
            and (n.daemons.get(daemon) or {}).get("state") == "running"]


def node_is_up(name: str) -> bool:
    node = Node.objects.filter(name=name).first()
    return node is not None and node.state == Node.State.UP and not is_down(node)


def nodes_serving(pool, service: str) -> list:
    """The nodes (rows, by name) that serve ``service``'s resources on ``pool``, down or
    not; none on a single host that never registered its node."""
    nodes = list(Node.objects.all())
    names = set(_names_serving(pool, service, nodes))
    return [n for n in nodes if n.name in names]
