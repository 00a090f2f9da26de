from django.apps import AppConfig


class PlaneConfig(AppConfig):
    name = "plane"
    # The label these models were created under: existing databases keep their tables
    # (console_job, console_auditevent, ...) and migration history.
    label = "console"
    verbose_name = "Strata management plane"

    def ready(self):
        # Import the Celery app so shared tasks bind to it in every process.
        from plane import signin  # noqa: F401  (its signal receivers audit sign-ins)
        from plane.celery import app  # noqa: F401  (binds shared tasks at start-up)
