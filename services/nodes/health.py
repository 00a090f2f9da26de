"""The cluster in /api/v1/health (each node: ``ok`` while it heartbeats) and the
dashboard's alerts (a node down, a node cordoned or drained)."""
from services.nodes import cluster
from services.nodes.models import Node


def service_health() -> dict:
    out = {}
    for node in Node.objects.all():
        state = cluster.state_of(node)
        out[node.name] = {"state": "ok" if state == Node.State.UP else state,
                          "node_state": state, "schedule": node.schedule,
                          "address": node.management_address,
                          "last_heartbeat": node.last_heartbeat,
                          "daemons": {name: d.get("state") for name, d
                                      in cluster.daemons_of(node).items()}}
    return out


def cluster_nodes() -> list[dict]:
    """The dashboard's Cluster table: every node, its state, last heartbeat and daemons."""
    return [{"name": node.name, "state": cluster.state_of(node), "schedule": node.schedule,
             "last_heartbeat": node.last_heartbeat, "address": node.management_address,
             "services": node.services,
             "daemons": {name: d.get("state") for name, d
                         in sorted(cluster.daemons_of(node).items())}}
            for node in Node.objects.all()]


def service_alerts() -> list[dict]:
    out = []
    for node in Node.objects.all():
        state = cluster.state_of(node)
        if state == Node.State.DOWN:
            out.append({"level": "error", "text": f"Node {node.name} is down: no heartbeat "
                        f"for more than {cluster.DOWN_AFTER:.0f} s; its daemons "
                        f"({', '.join(node.daemons) or 'none'}) are unknown"})
        elif node.schedule != Node.Schedule.ACTIVE:
            out.append({"level": "warning", "text": f"Node {node.name} is {node.schedule}"})
    return out
