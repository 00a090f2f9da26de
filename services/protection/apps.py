from django.apps import AppConfig


class ProtectionConfig(AppConfig):
    name = "services.protection"
    label = "protection"
    verbose_name = "Snapshot schedules, replication and backup"

    def ready(self):
        # here, not at the top: the receivers import models, which need the app registry
        from services.protection import signals  # noqa: F401  (connects the receivers)
