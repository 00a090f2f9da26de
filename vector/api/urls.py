from vector.api import views


def register(router) -> None:
    router.register("vector-collections", views.VectorCollectionViewSet,
                    basename="vector-collection")
