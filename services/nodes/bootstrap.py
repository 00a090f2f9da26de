"""Every start of `strata up` (single host): this host is a node of its own cluster, with a
credential for the heartbeats `strata up`'s agent sends (``DATA_DIR/node.json``, 0600)."""
import json

from django.conf import settings

from plumbing.atomic import write_atomic
from services.nodes import cluster


def bootstrap(creds: dict) -> dict:
    options = getattr(settings, "SERVICE_OPTIONS", None) or {}
    if not options.get("supervised") or options.get("plane_only"):
        return {}         # `strata plane`: the plane alone, no node on its host
    name = cluster.local_node_name()
    host = options.get("data_host") or options.get("host") or "127.0.0.1"
    credential = cluster.register_local(name, host)
    config = {"plane_url": creds["api_url"], "name": name, "credential": credential,
              "local": True, "ca_bundle": creds.get("ca_bundle")}
    write_atomic(settings.DATA_DIR / "node.json", json.dumps(config, indent=2) + "\n",
                 mode=0o600)
    print(f"node: {name}")
    return {}
