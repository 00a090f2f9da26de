"""libvirt attaches Strata volumes with the XML the API suggests: `virsh define` of the
export's domain (NBD) with the iSCSI export's `<disk>` added, its CHAP secret defined the way
the recipe's setup says (`virsh secret-define`, `secret-set-value`). libvirtd and virtlogd run
in a network namespace of the test's own; Strata's block daemons listen on the host end of its
veth, named by `strata up --data-host`'s option, so the guest's disks cross a real link."""
import hashlib
import os
import xml.etree.ElementTree as ET

import pytest

from services.block import up
from services.block.tests.conftest import need
from services.block.tests.planefixtures import CLIENT, SECRET, MiB, post, start_specs, stop_specs
from services.storage.models import Volume
from tests.guest import END
from tests.kit import free_port, wait_for
from tests.vmhost import Libvirtd, Netns

pytestmark = [pytest.mark.root, pytest.mark.django_db]

SCRIPT = """set -e
dd if=/a of=/dev/vda bs=1M oflag=direct conv=fsync 2>/dev/null
dd if=/b of=/dev/vdb bs=1M oflag=direct conv=fsync 2>/dev/null
echo VDA $(dd if=/dev/vda bs=1M count=1 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
echo VDB $(dd if=/dev/vdb bs=1M count=1 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def netns():
    with Netns() as ns:
        yield ns


@pytest.fixture
def block_on_link(data_dir, settings, netns):
    """tgtd and qemu-storage-daemon as `strata up --data-host HOST_END` starts them."""
    need("tgtd", "tgtadm", "qemu-storage-daemon", "virsh", "libvirtd", "virtlogd")
    options = {"host": "127.0.0.1", "port": 8080, "data_host": netns.host_ip,
               "iscsi_port": free_port(), "nbd_port": free_port()}
    settings.SERVICE_OPTIONS = options
    started = start_specs(up.daemons(data_dir, options), str(data_dir))
    try:
        yield options
    finally:
        stop_specs(started)


@pytest.fixture
def libvirtd(tmp_path, netns):
    daemon = Libvirtd(tmp_path / "libvirt", netns).start()
    try:
        yield daemon
    finally:
        daemon.stop()


def recipe(api, export):
    r = api.get(f"/api/v1/block-exports/{export['id']}/attach/")
    assert r.status_code == 200, r.json()
    return r.json()


def test_libvirt_domain_from_the_api_boots_on_nbd_and_iscsi_with_chap(
        guest_image, api, netns, block_on_link, libvirtd, tmp_path):
    post(api, "/api/v1/pools/", {"name": "p1", "driver": "directory"})
    for name in ("lv-nbd", "lv-iscsi"):
        post(api, "/api/v1/volumes/", {"name": name, "size_bytes": 16 * MiB, "pool": "p1"})
    post(api, "/api/v1/hosts/", {"name": "hv1", "iqn": CLIENT, "chap_user": "hv1",
                                 "chap_secret": SECRET})
    post(api, "/api/v1/host-groups/", {"name": "hypervisors", "hosts": ["hv1"]})
    nbd = post(api, "/api/v1/block-exports/", {"volume": "lv-nbd", "protocol": "nbd",
                                               "allow_any": True})
    iscsi = post(api, "/api/v1/block-exports/", {"volume": "lv-iscsi", "protocol": "iscsi",
                                                 "host_group": "hypervisors"})
    assert nbd["host"] == netns.host_ip and iscsi["portal"].startswith(netns.host_ip + ":")

    # the iSCSI recipe's setup: the CHAP secret as a libvirt secret (never in the domain)
    r_iscsi = recipe(api, iscsi)
    secret = r_iscsi["libvirt"]["secret"]
    (tmp_path / "secret.xml").write_text(secret["xml"])
    (tmp_path / "chap").write_text(SECRET)
    libvirtd.virsh("secret-define", str(tmp_path / "secret.xml"))
    libvirtd.virsh("secret-set-value", secret["uuid"], "--file", str(tmp_path / "chap"),
                   "--plain")

    # the NBD export's whole domain, plus the iSCSI export's <disk> as the second disk
    domain = ET.fromstring(recipe(api, nbd)["libvirt"]["domain"])
    disk = ET.fromstring(r_iscsi["libvirt"]["disk"])
    disk.find("target").set("dev", "vdb")
    devices = domain.find("devices")
    devices.insert(1, disk)
    # what a test adds: boot our kernel and initramfs, the console into a file
    a, b = os.urandom(MiB), os.urandom(MiB)
    initrd = guest_image.initrd_with(SCRIPT, {"/a": a, "/b": b}, tag="libvirt")
    os_ = domain.find("os")
    os_.remove(os_.find("boot"))
    for tag, text in (("kernel", guest_image.kernel), ("initrd", str(initrd)),
                      ("cmdline", "console=ttyS0 panic=-1 quiet")):
        ET.SubElement(os_, tag).text = text
    for el in devices.findall("serial") + devices.findall("console"):
        devices.remove(el)
    console = tmp_path / "console.log"
    serial = ET.SubElement(devices, "serial", type="file")
    ET.SubElement(serial, "source", path=str(console))
    (tmp_path / "domain.xml").write_text(ET.tostring(domain, encoding="unicode"))
    assert SECRET not in (tmp_path / "domain.xml").read_text()

    libvirtd.virsh("define", str(tmp_path / "domain.xml"))
    libvirtd.virsh("start", "strata-vm")
    wait_for(lambda: libvirtd.virsh("domstate", "strata-vm").stdout.strip() == "shut off",
             timeout=240, what="the guest to power off", interval=0.5)
    out = console.read_text(errors="replace")
    assert f"{END} 0 " in out, out[-3000:]
    assert f"VDA {sha(a)}" in out and f"VDB {sha(b)}" in out, out[-3000:]
    for name, data in (("lv-nbd", a), ("lv-iscsi", b)):
        with open(Volume.objects.get(name=name).path, "rb") as fh:
            assert fh.read(MiB) == data, name
