"""The console pages of the block service render their rows (no daemons needed)."""
import pytest

from services.block.models import BlockExport
from services.block.tests.planefixtures import CLIENT, MiB, make_volume, post
from services.storage.models import Volume

pytestmark = pytest.mark.django_db


def test_pages_list_hosts_groups_and_exports(api, client):
    make_volume(api, "v1", 8 * MiB)
    post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT, "chap_user": "client1",
                                 "chap_secret": "s3cret-chap-01"})
    post(api, "/api/v1/host-groups/", {"name": "hg1", "hosts": ["client1"]})
    BlockExport.objects.create(volume=Volume.objects.get(name="v1"), protocol="nbd",
                               connection={"uri": "nbd://127.0.0.1:10809/exp-1"})
    client.force_login(api.user)
    for slug, text in (("hosts", CLIENT), ("host-groups", "hg1"),
                       ("block-exports", "nbd://127.0.0.1:10809/exp-1")):
        r = client.get(f"/console/{slug}/")
        assert r.status_code == 200 and text in r.content.decode(), slug
    assert "s3cret-chap-01" not in client.get("/console/hosts/").content.decode()
    assert "s3cret" not in str(api.get("/api/v1/hosts/client1/").json())
