from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from console import metrics
from console.pages import views as pages
from plane.discovery import service_modules
from plane.signin import SignInForm

# The browsable API's sign-in, with the same failure limit as the console's.
browsable_api_auth = [
    path("login/", auth_views.LoginView.as_view(template_name="rest_framework/login.html",
                                                authentication_form=SignInForm), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]

urlpatterns = [
    path("api/v1/", include("console.api.urls")),
    path("metrics", metrics.prometheus, name="metrics"),
    path("api-auth/", include((browsable_api_auth, "rest_framework"))),
    path("login/", auth_views.LoginView.as_view(template_name="console/login.html",
         authentication_form=SignInForm, redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="/login/"), name="logout"),
    path("", RedirectView.as_view(pattern_name="console-dashboard", permanent=False)),
    path("console/", pages.dashboard, name="console-dashboard"),
    path("console/<slug:slug>/", pages.resource, name="console-resource"),
]

# A service with pages beyond the declared lists (a checkpoint timeline, ...) adds them in
# its `console_urls.py`; they live under /console/.
for _app, module in service_modules("console_urls"):
    urlpatterns.append(path("console/", include(module)))

handler400 = "console.errorpages.bad_request"
handler403 = "console.errorpages.permission_denied"
handler404 = "console.errorpages.not_found"
handler500 = "console.errorpages.server_error"
