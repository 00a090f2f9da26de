from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from console import metrics
from console.api import views
from plane.discovery import service_modules

router = DefaultRouter(trailing_slash=True)
router.register("jobs", views.JobViewSet)
router.register("audit", views.AuditEventViewSet)
router.register("users", views.UserViewSet)
router.register("me", views.MeViewSet, basename="me")
router.register("tokens", views.TokenViewSet, basename="token")
# Each service app with an `api/urls.py` defining `register(router)` adds its resources.
for _app, module in service_modules("api.urls"):
    module.register(router)

urlpatterns = [
    path("health", views.health, name="health"),
    path("health/", views.health_alias),
    path("metrics/series/", metrics.metric_series, name="metric-series"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("", include(router.urls)),
]
