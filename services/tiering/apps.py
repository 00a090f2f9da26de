from django.apps import AppConfig


class TieringConfig(AppConfig):
    name = "services.tiering"
    label = "tiering"
    verbose_name = "Tier moves and the shared I/O budget"
