from services.tiering.api import views


def register(router) -> None:
    router.register("io-budget", views.IOBudgetViewSet, basename="io-budget")
    router.register("tier-moves", views.TierMoveViewSet)
