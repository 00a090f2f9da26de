"""QoS combinations qemu-storage-daemon refuses are refused up front, with the field named
(no daemon is reached, nothing is created)."""
import pytest

from services.block.models import BlockExport
from services.block.tests.planefixtures import MiB, make_volume

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("qos,field", [
    ({"iops_total": 100, "iops_read": 50}, "iops_total"),
    ({"iops_total": 100, "iops_write": 50}, "iops_total"),
    ({"bps_total": 10 * MiB, "bps_read": MiB}, "bps_total"),
])
def test_a_total_limit_with_a_read_or_write_limit_is_a_400(api, qos, field):
    make_volume(api, "v1", 8 * MiB)
    r = api.post("/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd", **qos,
                                            "allow_any": True},
                 format="json")
    assert r.status_code == 400 and field in r.json()["fields"], r.content
    assert not BlockExport.objects.exists()


@pytest.mark.parametrize("body,field", [
    ({"protocol": "nbd"}, "allow_any"),                         # NBD cannot limit by host
    ({"protocol": "iscsi"}, "host_group"),                      # who may attach, or say any
    ({"protocol": "iscsi", "host_group": "hg1", "allow_any": True}, "allow_any"),
])
def test_open_to_any_initiator_is_an_explicit_choice(api, body, field):
    make_volume(api, "v1", 8 * MiB)
    api.post("/api/v1/host-groups/", {"name": "hg1"}, format="json")
    r = api.post("/api/v1/block-exports/", {"volume": "v1", **body}, format="json")
    assert r.status_code == 400 and field in r.json()["fields"], r.content
    assert not BlockExport.objects.exists()
