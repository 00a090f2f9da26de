"""A host without qemu-storage-daemon (PATH without it, under `strata up`'s supervision):
iSCSI exports still go online and are read with qemu-img's iSCSI initiator; NBD exports
answer 503 at creation, and one recorded earlier ends in state error naming the package. A
host without tgt deletes a host group without tgtd."""
import os
import subprocess

import pytest

from services.block import up
from services.block.bootstrap import bootstrap
from services.block.models import BlockExport
from services.block.tests.conftest import need
from services.block.tests.planefixtures import (
    CLIENT,
    MiB,
    iscsi_tool,
    make_volume,
    post,
    start_specs,
    stop_specs,
)
from services.storage.models import Volume
from tests.kit import free_port

pytestmark = pytest.mark.django_db


def path_without(tmp_path, monkeypatch, *missing: str) -> None:
    """PATH = one directory linking every program of the current PATH but ``missing``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            link = bindir / name
            if name not in missing and not link.exists():
                link.symlink_to(os.path.join(d, name))
    monkeypatch.setenv("PATH", str(bindir))


@pytest.fixture
def without_qsd(tmp_path, monkeypatch):
    need("tgtd", "tgtadm", "iscsi-inq", "qemu-img")
    path_without(tmp_path, monkeypatch, "qemu-storage-daemon")


def test_a_host_group_is_deleted_on_a_host_without_tgt(api, settings, tmp_path, monkeypatch):
    """A group made for NBD/NVMe-oF exports on a host without tgt: its delete needs no tgtd
    (it answered 503 "tgtd is not installed" before)."""
    settings.SERVICE_OPTIONS = {"host": "127.0.0.1", "port": 8080, "iscsi_port": free_port(),
                                "nbd_port": free_port()}
    path_without(tmp_path, monkeypatch, "tgtd", "tgtadm")
    post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT})
    group = post(api, "/api/v1/host-groups/", {"name": "hg1", "hosts": ["client1"]})
    r = api.delete(f"/api/v1/host-groups/{group['name']}/")
    assert r.status_code == 204, r.content
    assert api.get("/api/v1/host-groups/").json()["count"] == 0


def test_iscsi_serves_while_qemu_storage_daemon_is_not_installed(api, data_dir, settings,
                                                                 without_qsd, tmp_path):
    options = {"host": "127.0.0.1", "port": 8080, "iscsi_port": free_port(),
               "nbd_port": free_port(), "supervised": True}    # sessions adopt, as under up
    settings.SERVICE_OPTIONS = options
    specs = up.daemons(data_dir, options)
    assert [s.name for s in specs] == ["tgtd"]
    started = start_specs(specs, str(data_dir))
    try:
        vol = make_volume(api, "v1", 16 * MiB)
        data = os.urandom(16 * MiB)
        with open(vol["path"], "r+b") as f:
            f.write(data)
        post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT})
        post(api, "/api/v1/host-groups/", {"name": "hg1", "hosts": ["client1"]})
        iscsi = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "iscsi",
                                                     "host_group": "hg1"})
        assert iscsi["state"] == "online" and iscsi["error"] == "", iscsi

        # NBD needs the missing daemon: refused at once, saying what to install
        r = api.post("/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd",
                                                "allow_any": True}, format="json")
        assert r.status_code == 503, r.json()
        assert "qemu-storage-daemon is not installed" in r.json()["detail"], r.json()
        assert "qemu-system-common" in r.json()["detail"], r.json()

        # an NBD export recorded earlier (say, before the package was removed), then a new
        # `strata up` (fresh tgtd, empty): the reconcile brings iSCSI back, NBD goes to error
        nbd = BlockExport.objects.create(volume=Volume.objects.get(name="v1"), protocol="nbd",
                                         allow_any=True)
        stop_specs(started)
        started[:] = start_specs(up.daemons(data_dir, options), str(data_dir))
        assert iscsi_tool("iscsi-inq", iscsi, user=None).returncode != 0
        bootstrap({})
        rows = {e.protocol: e for e in BlockExport.objects.all()}
        assert rows["iscsi"].state == "online", rows["iscsi"].error
        assert rows["nbd"].pk == nbd.pk and rows["nbd"].state == "error"
        assert "qemu-storage-daemon is not installed" in rows["nbd"].error
        shown = api.get(f"/api/v1/block-exports/{nbd.pk}/").json()
        assert shown["state"] == "error" and "qemu-system-common" in shown["error"], shown

        # health names the protocol that is off and what to install; it is no fault of
        # the running ones, so the appliance is not degraded for it
        block = api.get("/api/v1/health").json()["services"]["block"]
        assert block["iscsi"]["state"] == "ok", block
        assert block["nbd"]["state"] == "not_installed", block
        assert "qemu-system-common" in block["nbd"]["detail"], block

        # the iSCSI LUN reads back the volume's bytes through a real initiator
        inq = iscsi_tool("iscsi-inq", iscsi, user=None)
        assert inq.returncode == 0 and "DIRECT_ACCESS" in inq.stdout, inq.stderr
        host, port = iscsi["portal"].rsplit(":", 1)
        out = tmp_path / "out.bin"
        cp = subprocess.run(
            ["qemu-img", "convert", "-O", "raw", "--image-opts",
             f"driver=iscsi,transport=tcp,portal={host}:{port},target={iscsi['target_iqn']},"
             f"lun={iscsi['lun']},initiator-name={CLIENT}", str(out)],
            capture_output=True, check=False, text=True, timeout=120)
        assert cp.returncode == 0, cp.stderr
        assert out.read_bytes() == data
    finally:
        stop_specs(started)
