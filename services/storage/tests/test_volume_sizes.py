"""A volume's size is bounded (issue 34): at least 1 MiB, whole 512-byte sectors, at most what
its pool's driver serves; out of range is a 400 naming size_bytes, and nothing is made."""
import pytest

from dataplane import MAX_VOLUME_BYTES
from services.storage.models import Volume

pytestmark = pytest.mark.django_db
MiB = 1 << 20


@pytest.fixture
def pool(api):
    r = api.post("/api/v1/pools/", {"name": "p1", "driver": "directory"}, format="json")
    assert r.status_code == 201, r.json()
    return r.json()


@pytest.mark.parametrize("size", [1, MiB - 512, MiB + 1, MAX_VOLUME_BYTES["directory"] + 512,
                                  2**63 - 1])
def test_a_volume_size_out_of_range_is_a_400_naming_size_bytes(api, pool, size):
    r = api.post("/api/v1/volumes/", {"name": "v1", "pool": "p1", "size_bytes": size},
                 format="json")
    assert r.status_code == 400 and "size_bytes" in r.json()["fields"], r.content
    assert not Volume.objects.exists()


def test_resize_and_clone_are_bounded_too(api, pool):
    r = api.post("/api/v1/volumes/", {"name": "v1", "pool": "p1", "size_bytes": MiB},
                 format="json")
    assert r.status_code == 201 and r.json()["thin"] is True, r.content
    for size in (2**63 - 1, 3 * MiB + 7):
        r = api.post("/api/v1/volumes/v1/resize/", {"size_bytes": size}, format="json")
        assert r.status_code == 400 and "size_bytes" in r.json()["fields"], r.content
    r = api.post("/api/v1/snapshots/", {"name": "s1", "volume": "v1"}, format="json")
    assert r.status_code == 201, r.content
    r = api.post(f"/api/v1/snapshots/{r.json()['id']}/clone/",
                 {"name": "c1", "size_bytes": 2**63 - 1}, format="json")
    assert r.status_code == 400 and "size_bytes" in r.json()["fields"], r.content
    assert list(Volume.objects.values_list("name", "size_bytes")) == [("v1", MiB)]


def test_a_thin_volume_may_claim_more_than_the_pool_holds(api, pool):
    # overcommit is allowed and said so (thin: true; the field's help in the schema)
    big = 2 * pool["size_bytes"] // MiB * MiB if pool["size_bytes"] else 64 << 30
    r = api.post("/api/v1/volumes/", {"name": "v1", "pool": "p1", "size_bytes": big},
                 format="json")
    assert r.status_code == 201 and r.json()["thin"] is True, r.content
    schema = api.get("/api/v1/schema/?format=json").json()
    help_text = schema["components"]["schemas"]["Volume"]["properties"]["size_bytes"]
    assert "overcommit" in help_text["description"] and help_text["minimum"] == MiB
