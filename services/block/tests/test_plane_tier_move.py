"""A volume exported over iSCSI and NBD moves to another pool (a tier move on two real btrfs
pools) and stays served under the same portal, target IQN, LUN and NBD export name: what
was written before the move reads back through them, new writes land in the new copy, and
qemu-io sessions opened before the move go on over the same connection. A move whose
re-point is refused leaves the exports serving the old copy. Exports that cannot follow
(NVMe-oF) make the move 409."""
import os

import pytest

from services.block.tests.planefixtures import (  # noqa: F401  (fixtures)
    CLIENT,
    SECRET,
    MiB,
    block_daemons,
    make_volume,
    post,
)
from services.block.tests.qemuio import QemuIo

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]


def image_opts(exp):
    return (f"driver=iscsi,transport=tcp,portal={exp['portal']},target={exp['target_iqn']},"
            f"lun={exp['lun']},initiator-name={CLIENT},user=client1,password={SECRET}")


def pattern_at(path, offset, size=MiB):
    with open(path, "rb") as f:
        f.seek(offset)
        return set(f.read(size))


def exported_volume(api):
    """Pools flash and cap (btrfs on loop devices), volume vm in flash exported over iSCSI
    (host group with CHAP) and NBD; returns (volume, iSCSI export, NBD export)."""
    for name, media in (("flash", "flash"), ("cap", "capacity")):
        post(api, "/api/v1/pools/", {"name": name, "driver": "local", "media": media,
                                     "devices": ["image:300M"]})
    vol = make_volume(api, "vm", 32 * MiB, pool="flash")
    post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT, "chap_user": "client1",
                                 "chap_secret": SECRET})
    post(api, "/api/v1/host-groups/", {"name": "hg1", "hosts": ["client1"]})
    iscsi = post(api, "/api/v1/block-exports/", {"volume": "vm", "protocol": "iscsi",
                                                 "host_group": "hg1"})
    nbd = post(api, "/api/v1/block-exports/", {"volume": "vm", "protocol": "nbd",
                                               "allow_any": True})
    assert iscsi["state"] == nbd["state"] == "online", (iscsi, nbd)
    return vol, iscsi, nbd


def connection(exp):
    keys = ("target_iqn", "portal", "lun", "name", "host", "port", "uri", "state", "error")
    return {k: exp[k] for k in keys if k in exp}


def test_exports_follow_a_moved_volume(api, block, worker):
    from tests.kit import run_job
    from services.storage.models import Volume

    vol, iscsi, nbd = exported_volume(api)
    with QemuIo(["--image-opts", image_opts(iscsi)]) as over_iscsi, \
            QemuIo(["-f", "raw", nbd["uri"]]) as over_nbd:
        over_iscsi.check("write -P 0x41 0 1M")
        over_iscsi.check("flush")
        over_nbd.check("write -P 0x42 1M 1M")
        over_nbd.check("flush")

        job = run_job(api, "/api/v1/tier-moves/", {"volume": "vm", "pool": "cap"})
        assert job["state"] == "succeeded", job
        moved = Volume.objects.get(name="vm")
        assert moved.pool.name == "cap" and moved.path != vol["path"]
        assert not os.path.exists(vol["path"])             # the hot copy is released
        for exp in (iscsi, nbd):                           # same connection info, online
            now = api.get(f"/api/v1/block-exports/{exp['id']}/").json()
            assert connection(now) == connection(exp), now

        # the sessions opened before the move read and write the new copy
        over_iscsi.check("read -P 0x41 0 1M")
        over_iscsi.check("read -P 0x42 1M 1M")
        over_iscsi.check("write -P 0x43 2M 1M")
        over_iscsi.check("flush")
        over_nbd.check("read -P 0x41 0 1M")
        over_nbd.check("write -P 0x44 3M 1M")
        over_nbd.check("flush")
    # new sessions through the same portal/IQN/LUN and NBD name see everything
    with QemuIo(["--image-opts", image_opts(iscsi)]) as over_iscsi:
        over_iscsi.check("read -P 0x44 3M 1M")
    with QemuIo(["-f", "raw", nbd["uri"]]) as over_nbd:
        over_nbd.check("read -P 0x43 2M 1M")
    for n, byte in enumerate((0x41, 0x42, 0x43, 0x44)):
        assert pattern_at(moved.path, n * MiB) == {byte}
    for exp in (iscsi, nbd):
        assert api.delete(f"/api/v1/block-exports/{exp['id']}/").status_code == 204
    assert api.delete("/api/v1/volumes/vm/").status_code == 204


def test_a_refused_repoint_keeps_the_volume_and_its_exports_where_they_were(api, block,
                                                                            worker):
    """The block service re-points the exports; another receiver then refuses: the move
    puts the row back, the block service re-points the exports at the old copy again, and
    the new copy is dropped; sessions opened before go on writing the old copy."""
    from tests.kit import run_job
    from services.storage.drivers import driver_for
    from services.storage.models import Volume
    from services.tiering.signals import moved

    vol, iscsi, nbd = exported_volume(api)
    seen = []

    def refuse(sender, instance, **kwargs):   # runs after the block service's receiver
        if instance.pool.name == "cap":
            from services.block.service import runtime
            with runtime() as rt:               # the block exports had followed already
                seen.extend(rt.find(e).volume_of(e) for e in (iscsi["export_id"], nbd["export_id"]))
            raise RuntimeError("another service cannot follow")
    with QemuIo(["--image-opts", image_opts(iscsi)]) as over_iscsi, \
            QemuIo(["-f", "raw", nbd["uri"]]) as over_nbd:
        over_iscsi.check("write -P 0x41 0 1M")
        over_nbd.check("write -P 0x42 1M 1M")
        over_iscsi.check("flush")
        over_nbd.check("flush")
        moved.connect(refuse, sender=Volume)
        try:
            job = run_job(api, "/api/v1/tier-moves/", {"volume": "vm", "pool": "cap"})
        finally:
            moved.disconnect(refuse, sender=Volume)
        assert job["state"] == "failed" and "cannot follow" in job["error"], job
        assert len(seen) == 2 and all(p != vol["path"] for p in seen), seen
        row = Volume.objects.get(name="vm")
        assert (row.pool.name, row.path) == ("flash", vol["path"])
        assert driver_for("local").list_volumes("cap") == []
        for exp in (iscsi, nbd):
            now = api.get(f"/api/v1/block-exports/{exp['id']}/").json()
            assert connection(now) == connection(exp), now
        over_iscsi.check("read -P 0x42 1M 1M")
        over_iscsi.check("write -P 0x43 2M 1M")
        over_iscsi.check("flush")
        over_nbd.check("read -P 0x41 0 1M")
        over_nbd.check("write -P 0x44 3M 1M")
        over_nbd.check("flush")
    for n, byte in enumerate((0x41, 0x42, 0x43, 0x44)):
        assert pattern_at(vol["path"], n * MiB) == {byte}
    for exp in (iscsi, nbd):
        assert api.delete(f"/api/v1/block-exports/{exp['id']}/").status_code == 204


def test_a_move_whose_export_cannot_be_repointed_fails_and_keeps_serving_the_old_copy(
        api, block, worker):
    """The new copy is made unwritable for the daemons (a read-only bind mount over it,
    before the block service's receiver runs): tgtd cannot serve it writable, the block
    service refuses, the move puts the volume back and drops the new copy; the exports never
    stopped serving the old one."""
    import subprocess

    from services.block.signals import follow_moved_volume
    from tests.kit import run_job
    from services.storage.drivers import driver_for
    from services.storage.models import Volume
    from services.tiering.signals import moved

    vol, iscsi, nbd = exported_volume(api)
    mounted = []

    def read_only_new_copy(sender, instance, old_path, **kwargs):
        if instance.pool.name == "cap":          # the switch: hide the new copy read-only
            d = os.path.dirname(instance.path)
            subprocess.run(["mount", "--bind", d, d], check=True)
            mounted.append(d)
            subprocess.run(["mount", "-o", "remount,bind,ro", d], check=True)
        elif mounted:                            # the way back: let the move drop it
            subprocess.run(["umount", mounted.pop()], check=True)
    moved.disconnect(follow_moved_volume, sender=Volume)
    moved.connect(read_only_new_copy, sender=Volume)
    moved.connect(follow_moved_volume, sender=Volume)     # after the test's receiver
    try:
        with QemuIo(["--image-opts", image_opts(iscsi)]) as over_iscsi:
            over_iscsi.check("write -P 0x41 0 1M")
            over_iscsi.check("flush")
            job = run_job(api, "/api/v1/tier-moves/", {"volume": "vm", "pool": "cap"})
            assert job["state"] == "failed", job
            assert iscsi["export_id"] in job["error"] and "read-only" in job["error"], job
            row = Volume.objects.get(name="vm")
            assert (row.pool.name, row.path) == ("flash", vol["path"])
            assert driver_for("local").list_volumes("cap") == []   # the new copy is gone
            over_iscsi.check("read -P 0x41 0 1M")
            over_iscsi.check("write -P 0x43 2M 1M")
            over_iscsi.check("flush")
    finally:
        moved.disconnect(read_only_new_copy, sender=Volume)
        moved.disconnect(follow_moved_volume, sender=Volume)
        moved.connect(follow_moved_volume, sender=Volume)
        for d in mounted:
            subprocess.run(["umount", "-l", d], check=False)
    with QemuIo(["-f", "raw", nbd["uri"]]) as over_nbd:
        over_nbd.check("read -P 0x43 2M 1M")
    assert pattern_at(vol["path"], 0) == {0x41} and pattern_at(vol["path"], 2 * MiB) == {0x43}
    for exp in (iscsi, nbd):
        now = api.get(f"/api/v1/block-exports/{exp['id']}/").json()
        assert connection(now) == connection(exp), now
        assert api.delete(f"/api/v1/block-exports/{exp['id']}/").status_code == 204


def test_a_write_during_the_switch_undoes_the_move(api, block, worker):
    """A client writes through its export after the move's last copy round (here: from a
    receiver that runs just before the block service's, while the export still serves the
    old copy): the move is undone, and the write is still there through the same export."""
    from services.block.signals import follow_moved_volume
    from tests.kit import run_job
    from services.storage.models import Volume
    from services.tiering.signals import moved

    vol, iscsi, nbd = exported_volume(api)
    with QemuIo(["-f", "raw", nbd["uri"]]) as over_nbd:
        over_nbd.check("write -P 0x41 0 1M")
        over_nbd.check("flush")

        def late_writer(sender, instance, undo=False, **kwargs):
            if not undo:
                over_nbd.check("write -P 0x45 5M 4k")
                over_nbd.check("flush")
        moved.disconnect(follow_moved_volume, sender=Volume)
        moved.connect(late_writer, sender=Volume)
        moved.connect(follow_moved_volume, sender=Volume)
        try:
            job = run_job(api, "/api/v1/tier-moves/", {"volume": "vm", "pool": "cap"})
        finally:
            moved.disconnect(late_writer, sender=Volume)
            moved.disconnect(follow_moved_volume, sender=Volume)
            moved.connect(follow_moved_volume, sender=Volume)
        assert job["state"] == "failed" and "during the switch" in job["error"], job
        assert Volume.objects.get(name="vm").path == vol["path"]
        over_nbd.check("read -P 0x45 5M 4k")
        over_nbd.check("read -P 0x41 0 1M")
    with QemuIo(["--image-opts", image_opts(iscsi)]) as over_iscsi:
        over_iscsi.check("read -P 0x45 5M 4k")
    assert pattern_at(vol["path"], 5 * MiB, 4096) == {0x45}
    for exp in (iscsi, nbd):
        assert api.delete(f"/api/v1/block-exports/{exp['id']}/").status_code == 204


def test_move_of_a_volume_with_an_export_that_cannot_follow_is_refused(api, block):
    """NVMe-oF exports (SPDK bdevs) cannot follow; the 409 names them. Checked on rows: no
    spdk_tgt runs here, and an spdk volume could not be moved anyway (no send/receive)."""
    from services.block.models import BlockExport
    from services.storage.models import Volume

    make_volume(api, "v1", 16 * MiB, pool="p1")
    post(api, "/api/v1/pools/", {"name": "p2", "driver": "directory"})
    nbd = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd",
                                               "allow_any": True})
    row = BlockExport.objects.create(volume=Volume.objects.get(name="v1"), protocol="nvmf")
    r = api.post("/api/v1/tier-moves/", {"volume": "v1", "pool": "p2"}, format="json")
    assert r.status_code == 409, r.json()
    assert row.export_id in r.json()["detail"] and "NVMe-oF" in r.json()["detail"], r.json()
    assert nbd["export_id"] not in r.json()["detail"]
    row.delete()
    assert api.delete(f"/api/v1/block-exports/{nbd['id']}/").status_code == 204
