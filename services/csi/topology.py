"""Topology: which nodes reach which pool. A node plugin's segment is
``topology.strata.io/node: <its node name>``; a volume is accessible from the nodes that serve
its pool for its service (``file`` for a file system, ``block`` for a volume), as the plane's
placement says (``GET nodes/placement/``: on a local pool the node holding it, on a Ceph pool
every node assigned the service, on a single-host appliance its one node)."""
import grpc

from plumbing.errors import Invalid
from services.csi.errors import CsiError
from services.csi.proto import csi_pb2

KEY = "topology.strata.io/node"
SERVICE_OF = {"filesystem": "file", "volume": "block"}


def segment(node_name: str) -> csi_pb2.Topology:
    return csi_pb2.Topology(segments={KEY: node_name})


def nodes_of(topologies, field: str) -> list[str]:
    """The node names of a list of topologies; Invalid naming ``field`` for a key of another
    driver's."""
    names = []
    for topo in topologies:
        unknown = sorted(k for k in topo.segments if k != KEY)
        if unknown or KEY not in topo.segments:
            raise Invalid(f"{field}: topology keys {', '.join(unknown) or '(none)'} are not "
                          f"this driver's; it knows {KEY}")
        if topo.segments[KEY] not in names:
            names.append(topo.segments[KEY])
    return names


def pools(client) -> dict[str, dict]:
    """Per pool name, its placement row: ``{"name", "driver", "file": [...], "block": [...]}``."""
    return {p["name"]: p for p in client.get("nodes/placement/").get("pools", [])}


def served_by(placement: dict, pool: str, kind: str) -> list[str]:
    return list((placement.get(pool) or {}).get(SERVICE_OF[kind], []))


def accessible(placement: dict, pool: str, kind: str) -> list[csi_pb2.Topology]:
    return [segment(n) for n in served_by(placement, pool, kind)]


def choose_pool(placement: dict, candidates: list[str], kind: str, requisite: list[str],
                preferred: list[str]) -> str:
    """The first candidate pool a preferred node serves, else the first a requisite node
    serves (any node when no requisite is given); RESOURCE_EXHAUSTED when none."""
    for wanted in ([preferred] if preferred else []) + [requisite]:
        for pool in candidates:
            nodes = served_by(placement, pool, kind)
            if nodes and (not wanted or set(nodes) & set(wanted)):
                if wanted is preferred and requisite and not set(nodes) & set(requisite):
                    continue
                return pool
    raise CsiError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                   f"no pool ({', '.join(candidates) or 'none'}) is served by node(s) "
                   f"{', '.join(requisite or preferred)} for {SERVICE_OF[kind]} volumes")
