"""The console's page of one NFS export: its entries (nodes) and how a client mounts it."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.urls import path

from plane.pages import page_context
from services.file.entries import export_entries
from services.file.models import NfsExport


@login_required
def export_page(request, pk):
    """The export's entries and the Linux mount command through each."""
    export = get_object_or_404(NfsExport.objects.select_related("filesystem__pool"), pk=pk)
    return render(request, "file/export.html", page_context(
        request, export=export, where=export_entries(export)))


urlpatterns = [path("nfs-exports/<int:pk>/", export_page, name="nfs-export")]
