from django.apps import AppConfig


class ProtectionConfig(AppConfig):
    name = "services.protection"
    label = "protection"
    verbose_name = "Snapshot schedules, replication and backup"
