from django.apps import AppConfig


class FileConfig(AppConfig):
    name = "services.file"
    label = "file"
    verbose_name = "File service: NFS exports, SMB shares and SMB users"

    def ready(self):
        from services.file import signals  # noqa: F401  (connects the receivers)
