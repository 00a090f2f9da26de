"""On a plane without block daemons (`strata plane`): an export is recorded `pending`, and
changed and deleted without a daemon being started; the cluster's nodes apply it (their
revision moves; tests/test_ceph_cluster.py serves one from a node)."""
import pytest

from services.block import service
from services.block.models import BlockExport
from services.nodes import cluster
from services.nodes.models import Node
from services.storage.models import Pool, Volume

pytestmark = pytest.mark.django_db


def test_a_plane_alone_records_exports_for_the_nodes(settings, tmp_path):
    settings.SERVICE_OPTIONS = {"plane_only": True}
    settings.DATA_DIR = tmp_path
    key, _ = cluster.create_join_token()
    cluster.join(key, "n1", "10.0.0.1", "10.0.0.1")
    pool = Pool.objects.create(name="shared", driver="ceph")
    vol = Volume.objects.create(name="disk", pool=pool, size_bytes=1 << 20,
                                path="rbd:p/disk:id=admin:conf=/etc/ceph/ceph.conf")
    before = Node.objects.get(name="n1").revision
    export = service.create_export(volume=vol, protocol="nbd", allow_any=True)
    assert (export.state, export.connection) == ("pending", {})
    assert Node.objects.get(name="n1").revision > before
    service.update_export(export, {"bps_write": 1000})
    assert BlockExport.objects.get(pk=export.pk).bps_write == 1000
    service.delete_export(export)
    assert not BlockExport.objects.exists()
    assert not (tmp_path / "block").exists()            # no daemon was started here
    cluster.remove("n1")
