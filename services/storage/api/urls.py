from services.storage.api import views


def register(router) -> None:
    router.register("pools", views.PoolViewSet)
    router.register("filesystems", views.FileSystemViewSet)
    router.register("volumes", views.VolumeViewSet)
    router.register("snapshots", views.SnapshotViewSet)
