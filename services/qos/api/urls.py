from services.qos.api import views


def register(router) -> None:
    router.register("qos/classes", views.WorkClassViewSet, basename="work-class")
