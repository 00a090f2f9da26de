from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.urls import path

from plane.pages import page_context
from services.checkpoints import retention
from services.checkpoints.models import CheckpointJob


@login_required
def timeline(request, name):
    """A job's versions newest first, with state and tier, and the retention preview."""
    job = get_object_or_404(CheckpointJob, name=name)
    versions = job.versions.order_by("-step").prefetch_related("leases")[:200]
    return render(request, "checkpoints/timeline.html", page_context(
        request, job=job, versions=versions, plan=retention.plan(job)))


urlpatterns = [path("checkpoints/<str:name>/", timeline, name="checkpoint-timeline")]
