from django.apps import AppConfig


class QosConfig(AppConfig):
    name = "services.qos"
    label = "qos"
    verbose_name = "Classes of work and their shares"

    def ready(self):
        from services.qos import signals  # noqa: F401 - connects the receivers
