"""Console views: the dashboard and the declared resource pages."""
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render

from console.dashboard import dashboard_context
from console.pages import core
from plane.pages import all_pages
from plane.roles import ADMIN, can_change, role_of


def _pages():
    return all_pages() + core.PAGES


def _nav(user):
    groups: dict = {}
    for page in _pages():
        if page.slug in core.ADMIN_ONLY and role_of(user) != ADMIN:
            continue
        groups.setdefault(page.group, []).append(page)
    return groups


def page_context(request, **extra):
    """What every console template needs: the navigation, the role, whether it may change."""
    return {"nav": _nav(request.user), "role": role_of(request.user),
            "can_change": can_change(request.user), **extra}


@login_required
def dashboard(request):
    return render(request, "console/dashboard.html", page_context(request, **dashboard_context()))


@login_required
def resource(request, slug):
    page = next((p for p in _pages() if p.slug == slug), None)
    if page is None:
        raise Http404(slug)
    if page.slug in core.ADMIN_ONLY and role_of(request.user) != ADMIN:
        return redirect("console-dashboard")
    return render(request, "console/resource.html", page_context(request, page=page))
