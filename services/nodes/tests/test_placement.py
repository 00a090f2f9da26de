"""What each node serves (services.nodes.placement): local pools on the node holding them,
Ceph pools on every node assigned the service; the revision that makes nodes follow changes;
the Ceph client files only a node's credential fetches."""
import pytest
from rest_framework.test import APIClient

from services.file.models import NfsExport
from services.nodes import cluster, placement
from services.nodes.models import Node
from services.storage.models import FileSystem, Pool, Volume

pytestmark = pytest.mark.django_db


def pools():
    local = Pool.objects.create(name="disks-a", driver="local", node="a")
    ceph = Pool.objects.create(name="shared", driver="ceph",
                               ceph={"conf": "/nonexistent/ceph.conf", "client": "admin"})
    FileSystem.objects.create(name="on-a", pool=local)
    FileSystem.objects.create(name="on-ceph", pool=ceph)
    Volume.objects.create(name="vol-a", pool=local, size_bytes=1)
    return local, ceph


def test_local_pools_on_their_node_ceph_pools_on_every_node_of_the_service(settings):
    local, ceph = pools()
    Node.objects.create(name="a", management_address="a", data_address="a",
                        services=["file", "block"])
    Node.objects.create(name="b", management_address="b", data_address="b", services=["file"])
    Node.objects.create(name="c", management_address="c", data_address="c", services=["block"])
    Node.objects.create(name="d", management_address="d", data_address="d", services=["file"],
                        schedule=Node.Schedule.DRAINED)
    entries = placement.entries()
    nodes = {e["name"]: e["nodes"] for e in entries["filesystems"] + entries["volumes"]}
    assert nodes == {"on-a": ["a"], "on-ceph": ["a", "b"], "vol-a": ["a"]}
    by_pool = {p["name"]: (p["file"], p["block"]) for p in entries["pools"]}
    assert by_pool[local.name] == (["a"], ["a"]) and by_pool[ceph.name] == (["a", "b"], ["a", "c"])
    assert placement.serves(Node.objects.get(name="b")) == {"filesystems": ["on-ceph"],
                                                            "volumes": []}
    assert placement.serves(Node.objects.get(name="c")) == {"filesystems": [], "volumes": []}

    # the plane and `strata up` serve all; an agent's processes what is placed on them
    assert placement.served_here(local, "file") and placement.served_here(ceph, "file")
    settings.STRATA_NODE_AGENT, settings.STRATA_NODE_NAME = True, "b"
    assert not placement.served_here(local, "file")
    assert placement.served_here(ceph, "file") and not placement.served_here(ceph, "block")
    settings.STRATA_NODE_NAME = "a"
    assert placement.served_here(local, "block")


def test_a_wish_bumps_every_nodes_revision_an_outcome_does_not(settings):
    _local, _ceph = pools()
    key, _ = cluster.create_join_token()
    node, answer = cluster.join(key, "n1", "10.0.0.1", "10.0.0.1")
    before = Node.objects.get(name="n1").revision
    exp = NfsExport.objects.create(filesystem=FileSystem.objects.get(name="on-ceph"),
                                   pseudo="/x", clients=["*"])
    assert Node.objects.get(name="n1").revision == before + 1
    exp.state = "online"
    exp.save(update_fields=["state", "error"])              # a node recording what it did
    assert Node.objects.get(name="n1").revision == before + 1
    exp.delete()
    assert Node.objects.get(name="n1").revision == before + 2
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {answer['credential']}")
    beat = client.post("/api/v1/nodes/heartbeat/", {"daemons": {}}, format="json").json()
    assert beat["revision"] == before + 2
    cluster.remove("n1")


def test_only_a_node_fetches_the_ceph_client_files(api, tmp_path):
    conf, keyring = tmp_path / "ceph.conf", tmp_path / "ceph.client.admin.keyring"
    conf.write_text("[global]\nmon_host = 10.78.0.1:6789\n[client]\nkeyring = "
                    f"{tmp_path}/ceph.$name.keyring\n")
    keyring.write_text("[client.other]\n\tkey = OTHER==\n[client.admin]\n\tkey = ADMIN==\n")
    Pool.objects.create(name="shared", driver="ceph", ceph={"conf": str(conf),
                                                            "client": "admin"})
    key, _ = cluster.create_join_token()
    _node, answer = cluster.join(key, "n1", "10.0.0.1", "10.0.0.1")
    assert api.get("/api/v1/nodes/self/ceph/").status_code == 401      # a user's token
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {answer['credential']}")
    files = client.get("/api/v1/nodes/self/ceph/").json()
    shared = files["pools"]["shared"]
    assert shared["client"] == "admin" and "mon_host = 10.78.0.1:6789" in shared["conf"]
    assert shared["keyring"] == "[client.admin]\n\tkey = ADMIN==\n"  # that client's key only

    from plumbing import nodeceph
    assert nodeceph.write_pool(tmp_path / "node", "shared", shared)
    written = nodeceph.read_pool(tmp_path / "node", "shared")
    text = open(written["conf"]).read()
    assert f"{tmp_path}/ceph.$name.keyring" not in text
    assert text.endswith(f"[client.admin]\nkeyring = {written['keyring']}\n")
    assert not nodeceph.write_pool(tmp_path / "node", "shared", shared)   # unchanged
    cluster.remove("n1")


def test_on_a_node_an_rbd_volume_opens_with_the_nodes_ceph_conf(settings, tmp_path):
    from plumbing import nodeceph
    from services.storage import service as storage

    _local, ceph = pools()
    vol = Volume.objects.create(name="vol-c", pool=ceph, size_bytes=1,
                                path="rbd:strata.shared/vol-c:id=admin:conf=/plane/ceph.conf"
                                     ":keyring=/plane/keyring")
    assert storage.volume_path(vol) == vol.path                # the plane: as the pool says
    settings.STRATA_NODE_AGENT, settings.DATA_DIR = True, tmp_path
    nodeceph.write_pool(tmp_path, "shared", {"conf": "[global]\n", "keyring": "k\n",
                                             "client": "admin", "filesystem": "", "root": ""})
    assert storage.volume_path(vol) == (f"rbd:strata.shared/vol-c:id=admin:conf="
                                        f"{tmp_path}/ceph/shared/ceph.conf")
