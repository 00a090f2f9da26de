"""A volume exported over block protocols and moved to another pool by tiering."""
import pytest

from services.block.tests.planefixtures import (  # noqa: F401  (fixtures)
    MiB,
    block_daemons,
    make_volume,
    post,
)

pytestmark = pytest.mark.django_db


def test_move_of_an_exported_volume_is_refused_naming_its_exports(api, block):
    make_volume(api, "v1", 16 * MiB, pool="p1")
    post(api, "/api/v1/pools/", {"name": "p2", "driver": "directory"})
    exp = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd"})
    r = api.post("/api/v1/tier-moves/", {"volume": "v1", "pool": "p2"}, format="json")
    assert r.status_code == 409, r.json()
    assert exp["export_id"] in r.json()["detail"] and "nbd" in r.json()["detail"], r.json()
    assert api.delete(f"/api/v1/block-exports/{exp['id']}/").status_code == 204
