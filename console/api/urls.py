from importlib import import_module
from importlib.util import find_spec

from django.apps import apps
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from console import metrics
from console.api import views

router = DefaultRouter(trailing_slash=True)
router.register("jobs", views.JobViewSet)
router.register("audit", views.AuditEventViewSet)
router.register("users", views.UserViewSet)
router.register("me", views.MeViewSet, basename="me")
# Each service app with an `api/urls.py` defining `register(router)` adds its resources.
for app in apps.get_app_configs():
    if app.name.startswith(("services.", "vector")) and find_spec(f"{app.name}.api.urls"):
        import_module(f"{app.name}.api.urls").register(router)

urlpatterns = [
    path("health", views.health, name="health"),
    path("health/", views.health),
    path("metrics/series/", metrics.metric_series, name="metric-series"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("", include(router.urls)),
]
