from services.nodes.api import views


def register(router) -> None:
    router.register("nodes", views.NodeViewSet)
