"""A real virtual machine (QEMU, TCG) attaches Strata volumes with the recipe the API returns
(`GET /api/v1/block-exports/{id}/attach/`) over NBD, vhost-user-blk and iSCSI with CHAP,
writes a pattern, reads it back and powers off; the host then finds the same bytes in the
volume. QoS on an export caps what the guest's dd gets; a snapshot taken while a guest
writes, cloned and booted in a second guest, holds a consistent prefix of the writes."""
import hashlib
import os
import re

import pytest

from services.block.tests.planefixtures import (  # noqa: F401  (fixtures)
    CLIENT,
    SECRET,
    MiB,
    block_daemons,
    post,
)
from services.storage.models import Volume
from tests.guest import Boot

pytestmark = [pytest.mark.root, pytest.mark.django_db]

# The guest writes /pattern at the start of /dev/vda and reads back what it wrote and what
# the host put at 8 MiB: both hashes go to the console.
WRITE_READ = """set -e
dd if=/pattern of=/dev/vda bs=1M oflag=direct conv=fsync 2>/dev/null
echo WROTE $(dd if=/dev/vda bs=1M count=1 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
echo HOSTDATA $(dd if=/dev/vda bs=1M skip=8 count=1 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
"""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def volume(api, name, size=32 * MiB, pool="p1", driver="directory", devices=()):
    if api.get(f"/api/v1/pools/{pool}/").status_code == 404:
        post(api, "/api/v1/pools/", {"name": pool, "driver": driver, "devices": list(devices)})
    post(api, "/api/v1/volumes/", {"name": name, "size_bytes": size, "pool": pool})
    return Volume.objects.get(name=name).path


def attach_recipe(api, export, **params):
    r = api.get(f"/api/v1/block-exports/{export['id']}/attach/", params)
    assert r.status_code == 200, r.json()
    return r.json()


def boot(image, recipe, script, tmp_path, files=None, tag="guest", timeout=240):
    """A guest with the recipe's QEMU arguments (its memory, for vhost-user-blk)."""
    memory = int(re.search(r"-m (\d+)M", recipe["qemu"]["command"]).group(1))
    initrd = image.initrd_with(script, files, tag=tag)
    return Boot(image.boot_args(initrd, memory) + recipe["qemu"]["args"],
                tmp_path / f"{tag}.log", timeout=timeout)


def write_read_in_guest(image, api, export, path, tmp_path, extra_script="", during=None,
                        **params):
    """The guest writes 1 MiB and reads back (then runs ``extra_script``; ``during(guest)`` is
    called while it runs); returns the guest."""
    pattern, host_data = os.urandom(MiB), os.urandom(MiB)
    with open(path, "r+b") as fh:           # what the host wrote, the guest must read
        fh.seek(8 * MiB)
        fh.write(host_data)
    recipe = attach_recipe(api, export, **params)
    with boot(image, recipe, WRITE_READ + extra_script, tmp_path,
              {"/pattern": pattern}, tag=export["protocol"]) as guest:
        if during:
            during(guest)
        guest.wait()
        assert guest.marker("WROTE") == sha(pattern)
        assert guest.marker("HOSTDATA") == sha(host_data)
    with open(path, "rb") as fh:
        assert sha(fh.read(MiB)) == sha(pattern)    # the guest's bytes reached the volume
    return guest


def test_nbd_guest_writes_reads_and_qos_caps_its_reads(guest_image, api, block, tmp_path):
    path = volume(api, "vm-nbd", 40 * MiB)
    with open(path, "r+b") as fh:     # data to read: NBD answers holes without reading
        fh.seek(12 * MiB)
        fh.write(os.urandom(12 * MiB))
    limit = 4_000_000
    exp = post(api, "/api/v1/block-exports/", {"volume": "vm-nbd", "protocol": "nbd",
                                               "allow_any": True, "bps_read": limit})
    seen = {}

    def clock(guest):        # the host's clock: the console prints as the guest runs
        for mark in ("QOS-BEGIN", "QOS-END"):
            seen[mark] = guest.wait_for(mark)

    # QoS: 12 MiB read with O_DIRECT in the guest, at most the export's read limit
    write_read_in_guest(guest_image, api, exp, path, tmp_path,
                        "echo QOS-BEGIN\n"
                        "dd if=/dev/vda of=/dev/null bs=1M skip=12 count=12 iflag=direct "
                        "2>/dev/null\n"
                        "echo QOS-END\n", during=clock)
    rate = 12 * MiB / (seen["QOS-END"] - seen["QOS-BEGIN"])
    assert 0.8 * limit <= rate <= 1.2 * limit, f"guest read {rate / 1e6:.2f} MB/s"


def test_vhost_user_blk_guest_writes_and_reads(guest_image, api, block, tmp_path):
    path = volume(api, "vm-vhost")
    exp = post(api, "/api/v1/block-exports/", {"volume": "vm-vhost",
                                               "protocol": "vhost-user-blk"})
    write_read_in_guest(guest_image, api, exp, path, tmp_path, memory_mib=512)


def test_iscsi_guest_with_chap(guest_image, api, block, tmp_path):
    path = volume(api, "vm-iscsi")
    post(api, "/api/v1/hosts/", {"name": "hv1", "iqn": CLIENT, "chap_user": "hv1",
                                 "chap_secret": SECRET})
    post(api, "/api/v1/host-groups/", {"name": "hypervisors", "hosts": ["hv1"]})
    exp = post(api, "/api/v1/block-exports/", {"volume": "vm-iscsi", "protocol": "iscsi",
                                               "host_group": "hypervisors"})
    recipe = attach_recipe(api, exp)
    assert SECRET not in str(recipe)
    # the recipe's setup: the host's CHAP secret in a file QEMU reads (here in tmp_path)
    secret_file = tmp_path / "chap"
    secret_file.write_text(SECRET)
    wrong = tmp_path / "wrong-chap"
    wrong.write_text("not-the-secret")
    pattern = os.urandom(MiB)

    def args_with(secret):
        return [a.replace(recipe["libvirt"]["secret"]["file"], str(secret))
                for a in recipe["qemu"]["args"]]

    # a wrong secret: QEMU cannot log in and does not start the guest
    initrd = guest_image.initrd_with(WRITE_READ, {"/pattern": pattern}, tag="iscsi-bad")
    with Boot(guest_image.boot_args(initrd) + args_with(wrong), tmp_path / "bad.log",
              timeout=120) as guest:
        guest.proc.wait(120)
        assert guest.proc.returncode != 0
        assert "authentication" in guest.output().lower() or "login" in guest.output().lower(), \
            guest.output()[-2000:]

    host_data = os.urandom(MiB)
    with open(path, "r+b") as fh:
        fh.seek(8 * MiB)
        fh.write(host_data)
    initrd = guest_image.initrd_with(WRITE_READ, {"/pattern": pattern}, tag="iscsi")
    with Boot(guest_image.boot_args(initrd) + args_with(secret_file), tmp_path / "iscsi.log",
              timeout=240) as guest:
        guest.wait()
        assert guest.marker("WROTE") == sha(pattern)
        assert guest.marker("HOSTDATA") == sha(host_data)
    with open(path, "rb") as fh:
        assert sha(fh.read(MiB)) == sha(pattern)


RECORD = 16 * 1024
# Record i is "REC" and i on 8 digits, zero-padded to 16 KiB, written with O_DIRECT and a
# flush one after the other: at any moment the volume holds records 0..n-1, then zeros.
WRITE_RECORDS = """i=0
while [ $i -lt {count} ]; do
  printf 'REC%08d' $i | dd of=/dev/vda bs=16k seek=$i conv=sync,fsync oflag=direct 2>/dev/null
  [ $i = 0 ] && echo WRITING
  i=$((i + 1))
done
echo ALL-WRITTEN
"""
READ_CLONE = """k=$(cat /k)
echo PREFIX $(dd if=/dev/vda bs=16k count=$k iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
echo REST $(dd if=/dev/vda bs=16k skip=$k iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
"""


def record(i: int) -> bytes:
    return b"REC%08d" % i + bytes(RECORD - 11)


def test_snapshot_while_a_guest_writes_boots_as_a_consistent_clone(guest_image, api, block,
                                                                   tmp_path):
    count, size = 1024, 16 * MiB      # a thousand writes: seconds even on a fast machine
    volume(api, "vm-src", size, pool="vmpool", driver="local", devices=["image:1G"])
    exp = post(api, "/api/v1/block-exports/", {"volume": "vm-src", "protocol": "nbd",
                                               "allow_any": True})
    with boot(guest_image, attach_recipe(api, exp), WRITE_RECORDS.format(count=count),
              tmp_path, tag="writer") as writer:
        writer.wait_for("WRITING")
        snap = post(api, "/api/v1/snapshots/", {"name": "mid-write", "volume": "vm-src"})
        writer.kill()                 # a crash of the writer: the snapshot is what is left
        assert "ALL-WRITTEN" not in writer.output(), "the guest finished before the snapshot"
    post(api, f"/api/v1/snapshots/{snap['id']}/clone/", {"name": "vm-clone"}, expect=201)

    with open(Volume.objects.get(name="vm-clone").path, "rb") as fh:
        clone = fh.read()
    k = 0
    while k < count and clone[k * RECORD:(k + 1) * RECORD] == record(k):
        k += 1
    assert 0 < k < count
    assert clone[k * RECORD:] == bytes(size - k * RECORD), "not a prefix: a later write is there"

    exp2 = post(api, "/api/v1/block-exports/", {"volume": "vm-clone",
                                                "protocol": "vhost-user-blk"})
    with boot(guest_image, attach_recipe(api, exp2), READ_CLONE, tmp_path,
              {"/k": str(k).encode()}, tag="clone") as reader:
        reader.wait()
        assert reader.marker("PREFIX") == sha(b"".join(record(i) for i in range(k)))
        assert reader.marker("REST") == sha(bytes(size - k * RECORD))
