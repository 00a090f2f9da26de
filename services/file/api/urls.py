from services.file.api import views


def register(router) -> None:
    router.register("nfs-exports", views.NfsExportViewSet)
    router.register("smb-shares", views.SmbShareViewSet)
    router.register("smb-users", views.SmbUserViewSet)
