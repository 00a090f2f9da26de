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


@pytest.mark.parametrize("field,value", [
    ("address", "ALL"), ("address", "*"), ("address", "10.0.0.0/8"), ("address", "0.0.0.0"),
    ("address", "db1.example.com"),
    ("iqn", "ALL"), ("iqn", "iqn.2026-01.io.strata.test:*"), ("iqn", "iqn.a,iqn.b"),
    ("nqn", "nqn.2014-08.org.nvmexpress:uuid:*"),
])
def test_a_host_naming_more_than_one_initiator_is_a_400(api, field, value):
    # issue 34: a host whose address was ALL opened its groups' targets to every initiator
    r = api.post("/api/v1/hosts/", {"name": "h1", field: value}, format="json")
    assert r.status_code == 400 and field in r.json()["fields"], r.content
    assert "allow_any" in r.json()["detail"]
    from services.block.models import Host
    assert not Host.objects.exists()


def test_a_host_address_is_one_ip_address(api):
    r = api.post("/api/v1/hosts/", {"name": "h1", "address": " 192.0.2.10"}, format="json")
    assert r.status_code == 201 and r.json()["address"] == "192.0.2.10", r.content
    r = api.patch("/api/v1/hosts/h1/", {"address": "ALL"}, format="json")
    assert r.status_code == 400 and "address" in r.json()["fields"], r.content


@pytest.mark.parametrize("field", BlockExport.QOS_FIELDS)
def test_a_qos_limit_beyond_qemu_is_a_400_naming_the_field(api, field):
    # issue 34: 10^15 + 1 reached qemu-storage-daemon, which refused it: a 503
    make_volume(api, "v1", 8 * MiB)
    r = api.post("/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd", "allow_any": True,
                                            field: 10**15 + 1}, format="json")
    assert r.status_code == 400 and field in r.json()["fields"], r.content
    assert not BlockExport.objects.exists()
