"""An NFS export's entries on a cluster: a node's floating address, when it has one, is the
address clients are told to mount (it moves to a survivor when the node dies)."""
import pytest

from services.file.entries import export_entries
from services.file.models import NfsExport
from services.nodes.models import Node
from services.storage.models import FileSystem, Pool

pytestmark = pytest.mark.django_db


def test_entries_name_the_floating_address_where_a_node_has_one():
    ceph = Pool.objects.create(name="shared", driver="ceph",
                               ceph={"conf": "/nonexistent/ceph.conf", "client": "admin"})
    fs = FileSystem.objects.create(name="ckpt", pool=ceph)
    Node.objects.create(name="a", management_address="10.0.0.1", data_address="10.0.0.1",
                        services=["file"], floating_address="10.0.0.101/24")
    Node.objects.create(name="b", management_address="10.0.0.2", data_address="10.0.0.2",
                        services=["file"])
    export = NfsExport.objects.create(filesystem=fs, pseudo="/ckpt", clients=["*"])
    entries = {e["node"]: e for e in export_entries(export)["entries"]}
    assert entries["a"]["address"] == "10.0.0.101"
    assert entries["a"]["mount"] == ("mount -t nfs -o vers=4.1,nconnect=4,port=2049 "
                                     "10.0.0.101:/ckpt /mnt/ckpt")
    assert entries["b"]["address"] == "10.0.0.2"
