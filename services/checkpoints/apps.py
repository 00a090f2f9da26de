from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "services.checkpoints"
    label = "checkpoints"
    verbose_name = "Checkpoint jobs and versions: verified commit, retention, pre-warm"

    def ready(self):
        from services.checkpoints import signals  # noqa: F401  (connects the receivers)
