from django.apps import AppConfig


class NodesConfig(AppConfig):
    name = "services.nodes"
    label = "nodes"
    verbose_name = "The cluster's nodes: join, heartbeats, cordon, drain, remove"

    def ready(self):
        from services.nodes import placement   # noqa: PLC0415  (models are loaded now)
        placement.connect()
