"""The console's page of one bucket: its settings as the gateway holds them (ACL, public
access block, object ownership, policy, CORS, default encryption, Object Lock), usage and
quotas. Read-only: changes go through the API and the CLI (or the list page's actions)."""
import json

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.urls import path

from plane.pages import page_context
from plumbing.errors import NotFound
from services.object import kms, service
from services.object.models import PUBLIC_ACCESS_FLAGS, Bucket


@login_required
def bucket_page(request, name):
    """A bucket's settings, read fresh from the gateway (the rows as last recorded when it
    does not answer, and then no policy or CORS)."""
    bucket = get_object_or_404(Bucket.objects.select_related("filesystem", "filesystem__pool"), name=name)
    reachable = service.refresh_usage([bucket])
    access = service.bucket_access(bucket)
    block = bucket.public_access_block or {}
    try:
        kms_key = kms.find_kms_key(bucket.kms_key_id) if bucket.kms_key_id else None
    except NotFound:
        kms_key = None   # aws/s3, or a key listed in the gateway's config only
    return render(request, "object/bucket.html", page_context(
        request, bucket=bucket, reachable=reachable, kms_key=kms_key,
        public_access=[(flag, bool(block.get(flag))) for flag in PUBLIC_ACCESS_FLAGS],
        policy=json.dumps(access["policy"], indent=2) if access["policy"] else "",
        cors=access["cors"] or []))


urlpatterns = [path("buckets/<str:name>/", bucket_page, name="object-bucket")]
