"""The console's page of one block export: where it is, and how a VM attaches it."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.urls import path

from plane.pages import page_context
from plumbing.errors import StrataError
from services.block import service
from services.block.models import BlockExport


@login_required
def export_page(request, pk):
    """The export's connection info and its libvirt and QEMU attach recipes."""
    export = get_object_or_404(BlockExport.objects.select_related("volume", "host_group"),
                               pk=pk)
    host = request.GET.get("host") or None
    try:
        recipe, problem = service.attach_recipe(export, host), ""
    except StrataError as exc:        # not online, or an unknown host: say so on the page
        recipe, problem = None, str(exc)
    hosts = list(export.host_group.hosts.values_list("name", flat=True)) \
        if export.host_group else []
    return render(request, "block/export.html", page_context(
        request, export=export, recipe=recipe, problem=problem, hosts=hosts))


urlpatterns = [path("block-exports/<int:pk>/", export_page, name="block-export")]
