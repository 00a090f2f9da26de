"""The console's page of one file system: what it is, and its native CephFS keys (on ceph
pools) with the mount commands a host runs; keys are made and revoked here through the API."""
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.urls import path

from plane.pages import page_context
from services.storage import cephkeys
from services.storage.drivers import driver_for
from services.storage.models import FileSystem


@login_required
def filesystem_page(request, name):
    """The file system, and its keys when it is on a ceph pool."""
    fs = get_object_or_404(FileSystem.objects.select_related("pool"), name=name)
    native = bool(driver_for(fs.pool.driver).capabilities().get("client_keys"))
    keys = [(key, cephkeys.mount(key)) for key in fs.ceph_keys.all()] if native else []
    return render(request, "storage/filesystem.html", page_context(
        request, fs=fs, native=native, keys=keys))


urlpatterns = [path("filesystems/<str:name>/", filesystem_page, name="storage-filesystem")]
