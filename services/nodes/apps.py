from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "services.nodes"
    label = "nodes"
    verbose_name = "The cluster's nodes: join, heartbeats, cordon, drain, remove"

    def ready(self):
        from services.nodes import placement   # noqa: PLC0415  (models are loaded now)
        placement.connect()
        try:
            from services.object.public import node_config_changed   # noqa: PLC0415
        except ImportError:       # the object service not installed
            return
        node_config_changed.connect(lambda **_: placement.bump(),
                                    dispatch_uid="nodes.placement.s3_config", weak=False)
