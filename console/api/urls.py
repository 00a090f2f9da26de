from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from console.api import views
from services.storage.api.urls import register as register_storage

router = DefaultRouter(trailing_slash=True)
router.register("jobs", views.JobViewSet)
router.register("audit", views.AuditEventViewSet)
router.register("users", views.UserViewSet)
router.register("me", views.MeViewSet, basename="me")
register_storage(router)

urlpatterns = [
    path("health", views.health, name="health"),
    path("health/", views.health),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("", include(router.urls)),
]
