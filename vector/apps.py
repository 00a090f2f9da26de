from django.apps import AppConfig


class VectorConfig(AppConfig):
    name = "vector"
    label = "vector"
    verbose_name = "Vector collections (faiss) with durable writes"
