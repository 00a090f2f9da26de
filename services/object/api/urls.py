from services.object.api import views


def register(router) -> None:
    router.register("buckets", views.BucketViewSet)
    router.register("s3-keys", views.S3KeyViewSet)
    router.register("kms-keys", views.KmsKeyViewSet)
    router.register("s3-lifecycle-runs", views.LifecycleRunViewSet, basename="s3-lifecycle-run")
