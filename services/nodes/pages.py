"""The console's Nodes page: every node with its state, last heartbeat, addresses, services
and daemons; cordon, uncordon, drain and remove (admins)."""
from plane.pages import Action, Column, Page
from services.nodes import cluster, placement
from services.nodes.models import Node


def nodes() -> list:
    rows = list(Node.objects.all())
    for node in rows:
        node.live_state = cluster.state_of(node)
        node.daemon_line = ", ".join(f"{name} {d.get('state')}" for name, d
                                     in sorted(cluster.daemons_of(node).items()))
        node.serves_line = "; ".join(f"{kind}: {', '.join(names)}" for kind, names
                                     in sorted(placement.serves(node).items()) if names)
    return rows


PAGES = [
    Page(slug="nodes", title="Nodes", group="System", api="/api/v1/nodes/",
         queryset=nodes,
         help="Hosts of the cluster. A node joins with a one-use token (`strata node token "
              f"create`, then `strata node join` on the host) and heartbeats every "
              f"{cluster.HEARTBEAT_EVERY:.0f} s; after {cluster.DOWN_AFTER:.0f} s without one it "
              "is down and its daemons are unknown. A node serves the file systems and "
              "volumes of its own disks, and those of Ceph pools when it runs their service. "
              "Drain moves what can move (services of "
              "Ceph pools) to other nodes; what lives on a node's own disks cannot move. A "
              "node's floating address (`strata node assign NODE --floating-address "
              "A.B.C.D/P`) stays on it while it lives and moves to another node when it dies "
              "(keepalived on every node).",
         columns=[Column("name", "Name"), Column("live_state", "State", "state"),
                  Column("schedule", "Schedule", "state"),
                  Column("last_heartbeat", "Last heartbeat", "time"),
                  Column("management_address", "Management"),
                  Column("data_address", "Data"), Column("floating_address", "Floating"),
                  Column("services", "Services", "list"),
                  Column("daemon_line", "Daemons"), Column("serves_line", "Serves")],
         actions=[Action("Cordon", "/api/v1/nodes/{key}/cordon/"),
                  Action("Uncordon", "/api/v1/nodes/{key}/uncordon/"),
                  Action("Drain", "/api/v1/nodes/{key}/drain/",
                         confirm="Move what {name} serves to other nodes?")]),
]
