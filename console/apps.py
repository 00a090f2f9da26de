from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    label = "console"
    verbose_name = "Strata console"

    def ready(self):
        # Import the Celery app so shared tasks bind to it in every process.
        from console.celery import app  # noqa: F401
