"""A node's floating data address: set with a PATCH (what `strata node assign
--floating-address` sends), validated (400 naming the field), unique in the cluster, shown
in the API, and handed to the nodes (``nodes/self/vrrp/``) with the revision moved so that
every node's keepalived follows."""
import pytest

from services.nodes import cluster
from services.nodes.models import Node
from tests.cluster_support import join_node

pytestmark = pytest.mark.django_db


def _revisions() -> dict:
    return dict(Node.objects.values_list("name", "revision"))


def test_set_shown_and_handed_to_every_node(api):
    node1, _node2 = join_node("n1", "10.0.0.1"), join_node("n2", "10.0.0.2")
    before = _revisions()
    r = api.patch("/api/v1/nodes/n2/", {"floating_address": " 10.0.0.102/24 "}, format="json")
    assert r.status_code == 200, r.content
    assert r.json()["floating_address"] == "10.0.0.102/24"
    assert api.get("/api/v1/nodes/n2/").json()["floating_address"] == "10.0.0.102/24"
    after = _revisions()
    assert all(after[n] == before[n] + 1 for n in before)      # every node reconciles
    members = node1.get("/api/v1/nodes/self/vrrp/").json()["members"]
    assert members == [
        {"name": "n1", "data_address": "10.0.0.1", "floating_address": "", "drained": False},
        {"name": "n2", "data_address": "10.0.0.2", "floating_address": "10.0.0.102/24",
         "drained": False}]
    # drained, n2 gives its address up (keepalived's priorities): the peers are told
    cluster.drain("n2")
    assert _revisions()["n1"] == after["n1"] + 1
    members = node1.get("/api/v1/nodes/self/vrrp/").json()["members"]
    assert [m["drained"] for m in members] == [False, True]
    cluster.set_schedule("n2", "active")
    assert _revisions()["n1"] == after["n1"] + 2
    after = _revisions()
    # a node joining or leaving moves the revision too: the peers change
    join_node("n3", "10.0.0.3")
    assert _revisions()["n1"] == after["n1"] + 1
    cluster.remove("n3")
    assert _revisions()["n1"] == after["n1"] + 2
    # taken away
    r = api.patch("/api/v1/nodes/n2/", {"floating_address": ""}, format="json")
    assert r.status_code == 200 and r.json()["floating_address"] == ""
    for name in ("n1", "n2"):
        cluster.remove(name)


@pytest.mark.parametrize("bad", ["10.0.0.102", "10.0.0.300/24", "fe80::1/64", "node.example/24",
                                 "127.0.0.5/8", "10.0.0.0/24", "10.0.0.255/24", "224.0.0.18/4"])
def test_a_bad_address_is_a_400_naming_the_field(api, bad):
    Node.objects.create(name="n1", management_address="10.0.0.1", data_address="10.0.0.1")
    r = api.patch("/api/v1/nodes/n1/", {"floating_address": bad}, format="json")
    assert r.status_code == 400, r.content
    body = r.json()
    assert "floating_address" in body["fields"] and body["detail"].startswith("floating_address:")
    assert Node.objects.get(name="n1").floating_address == ""


def test_an_address_another_node_holds_is_refused(api):
    Node.objects.create(name="n1", management_address="10.0.0.1", data_address="10.0.0.1",
                        floating_address="10.0.0.101/24")
    Node.objects.create(name="n2", management_address="10.0.0.2", data_address="10.0.0.2")
    for taken in ("10.0.0.101/24", "10.0.0.101/16", "10.0.0.1/24"):
        r = api.patch("/api/v1/nodes/n2/", {"floating_address": taken}, format="json")
        assert r.status_code == 400, r.content
        assert "already node n1's address" in r.json()["fields"]["floating_address"][0]
    # its own address again is fine
    r = api.patch("/api/v1/nodes/n1/", {"floating_address": "10.0.0.101/24"}, format="json")
    assert r.status_code == 200, r.content


def test_only_admins_set_it_and_only_nodes_read_the_peers(viewer_api, api):
    Node.objects.create(name="n1", management_address="10.0.0.1", data_address="10.0.0.1")
    r = viewer_api.patch("/api/v1/nodes/n1/", {"floating_address": "10.0.0.101/24"},
                         format="json")
    assert r.status_code == 403
    assert api.get("/api/v1/nodes/self/vrrp/").status_code in (401, 403)


def test_the_nodes_page_shows_it(api, client):
    Node.objects.create(name="n1", management_address="10.0.0.1", data_address="10.0.0.1",
                        floating_address="10.0.0.101/24")
    client.force_login(api.user)
    page = client.get("/console/nodes/")
    assert page.status_code == 200 and b"10.0.0.101/24" in page.content
    assert b"Floating" in page.content
