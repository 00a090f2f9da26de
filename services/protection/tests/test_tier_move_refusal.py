"""A tier move of a file system or volume that a replication or backup uses is refused
(409): tiering asks through its ``check_move`` signal, protection answers."""
import pytest

from plumbing.errors import Conflict
from services.protection.models import Backup, BackupTarget, Replication, ReplicationPeer
from services.storage.models import FileSystem, Pool, Volume
from services.tiering.moves import check_movable

pytestmark = pytest.mark.django_db


def test_move_refused_while_a_replication_or_backup_uses_the_object():
    flash = Pool.objects.create(name="flash", driver="local")
    cap = Pool.objects.create(name="cap", driver="local", media="capacity")
    fs = FileSystem.objects.create(name="data", pool=flash)
    vol = Volume.objects.create(name="vm", pool=flash, size_bytes=1 << 20)
    target = BackupTarget.objects.create(name="s3", endpoint_url="http://127.0.0.1:1",
                                         access_key="a", secret_key="s", bucket="b")
    peer = ReplicationPeer.objects.create(name="site-b", url="http://127.0.0.1:1", token="t")
    Backup.objects.create(name="data-s3", filesystem=fs, target=target)
    Replication.objects.create(name="vm-b", volume=vol, peer=peer, target_pool="p",
                               target_name="vm")

    with pytest.raises(Conflict, match="used by backup data-s3"):
        check_movable(fs, cap)
    with pytest.raises(Conflict, match="used by replication vm-b"):
        check_movable(vol, cap)

    Backup.objects.all().delete()
    Replication.objects.all().delete()
    check_movable(fs, cap)  # nothing uses them now
    check_movable(vol, cap)
