from services.block.api import views


def register(router) -> None:
    router.register("hosts", views.HostViewSet)
    router.register("host-groups", views.HostGroupViewSet)
    router.register("block-exports", views.BlockExportViewSet)
