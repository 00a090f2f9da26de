from django.apps import AppConfig


class ObjectConfig(AppConfig):
    name = "services.object"
    label = "object"
    verbose_name = "S3 buckets and access keys"

    def ready(self):
        # Django: receivers connect once the app registry is ready, so not at module level
        from services.object import signals  # noqa: F401 - registers the receivers
