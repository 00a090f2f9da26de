from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "services.nodes"
    label = "nodes"
    verbose_name = "The cluster's nodes: join, heartbeats, cordon, drain, remove"

    def ready(self):
        from services.nodes import cluster, placement   # noqa: PLC0415  (models are loaded now)
        placement.connect()
        try:
            from services.object import public as s3   # noqa: PLC0415  (optional service)
        except ImportError:       # the object service not installed
            return
        s3.node_config_changed.connect(lambda **_: placement.bump(),
                                       dispatch_uid="nodes.placement.s3_config", weak=False)
        s3.find_node_gateways.connect(lambda **_: cluster.s3_gateways(),
                                      dispatch_uid="nodes.cluster.s3_gateways", weak=False)
