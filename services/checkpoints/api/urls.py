from services.checkpoints.api import views


def register(router) -> None:
    router.register("checkpoint-jobs", views.CheckpointJobViewSet)
    router.register(r"checkpoint-jobs/(?P<job_name>[a-z0-9][a-z0-9._-]{0,62})/versions",
                    views.CheckpointVersionViewSet, basename="checkpoint-version")
    router.register("checkpoint-leases", views.CheckpointLeaseViewSet)
