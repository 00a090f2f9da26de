"""Console views: the dashboard and the declared resource pages."""
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render

from console.dashboard import dashboard_context
from plane.pages import ADMIN_ONLY, all_pages, page_context
from plane.roles import ADMIN, role_of


@login_required
def dashboard(request):
    return render(request, "console/dashboard.html", page_context(request, **dashboard_context()))


@login_required
def resource(request, slug):
    page = next((p for p in all_pages() if p.slug == slug), None)
    if page is None:
        raise Http404(slug)
    if page.slug in ADMIN_ONLY and role_of(request.user) != ADMIN:
        return redirect("console-dashboard")
    return render(request, "console/resource.html", page_context(request, page=page))
