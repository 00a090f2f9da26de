from django.apps import AppConfig


class StorageConfig(AppConfig):
    name = "services.storage"
    label = "storage"
    verbose_name = "Pools, file systems, volumes and snapshots"
