from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("api/v1/", include("console.api.urls")),
    path("api-auth/", include("rest_framework.urls")),
    path("login/", auth_views.LoginView.as_view(template_name="console/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="/login/"), name="logout"),
    path("", RedirectView.as_view(url="/api/v1/docs/", permanent=False)),
]
