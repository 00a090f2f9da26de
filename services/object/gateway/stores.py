"""The store a gateway serves from, picked by its config: buckets in the data root
(:class:`.core.Gateway`, the default) or in a RADOS pool (``"store": {"kind": "rados", ...}``,
:class:`.rados_store.RadosGateway`), and the route a request takes on it (the RADOS store has
its own multipart handlers and refuses what it lacks with NotImplemented, :mod:`.rados_routes`).
"""
from __future__ import annotations

from .config import ConfigWatcher
from .core import Gateway, WorkerRole
from .routes import Route


def open_gateway(config_path: str, role: WorkerRole | None = None) -> Gateway:
    """The gateway of the config's store."""
    if (ConfigWatcher(config_path).config.get("store") or {}).get("kind") == "rados":
        from .rados_store import RadosGateway   # librados: loaded only by gateways of this store
        return RadosGateway(config_path, role)
    return Gateway(config_path, role)


def route_for(gw: Gateway, route: Route) -> Route:
    """The route a request of ``route``'s shape takes on ``gw``'s store."""
    if gw.kind != "rados":
        return route
    from . import rados_routes   # librados: loaded only by gateways of this store
    return rados_routes.adapt(route)
