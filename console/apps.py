from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The project on top: settings, URLs, the web console's pages, the `strata` command."""

    name = "console"
    label = "web"
    verbose_name = "Strata console"
