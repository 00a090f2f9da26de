from django.apps import AppConfig


class BlockConfig(AppConfig):
    name = "services.block"
    label = "block"
    verbose_name = "Block exports: iSCSI, NBD, vhost-user-blk, NVMe-oF"

    def ready(self):
        from services.block import signals  # noqa: F401  (guards volume delete and resize)
