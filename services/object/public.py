"""What other services may use of the object service (they import nothing else of it)."""
from services.object.bootstrap import node_gateway_config
from services.object.models import BUCKET_NAME_RE, Bucket
from services.object.service import (
    admin_call,
    class_as_checkpoints,
    admin_client,
    admin_endpoint,
    admin_endpoints,
    create_bucket,
    find_node_gateways,
    node_config_changed,
    refuse_on_nodes,
    plane_s3_config,
    public_endpoint,
    refresh_usage,
    write_gateway_config,
)

__all__ = ["BUCKET_NAME_RE", "Bucket", "admin_call", "admin_client", "admin_endpoint",
           "admin_endpoints",
           "class_as_checkpoints", "create_bucket", "find_node_gateways", "node_config_changed", "node_gateway_config", "plane_s3_config",
           "refuse_on_nodes", "public_endpoint",
           "refresh_usage", "write_gateway_config"]
