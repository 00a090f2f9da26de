"""A guest with networking mounts a Strata NFS export with the Linux kernel client (NFSv4.1,
nconnect=4) at the `nfs_path` the checkpoint catalog hands out, writes a checkpoint-like tree
from parallel writers, and the catalog's verified commit accepts it; an export whose client
rules do not name the guest's address refuses the same guest, and admits it once the guest
takes the address the rules name. The guest's tap sits on a
bridge in a network namespace of the test's own; ganesha.nfsd listens on the host end of its
veth (`strata up --data-host`)."""
import hashlib
import os
import shutil

import pytest

from services.checkpoints.tests.conftest import begin, commit
from services.file.tests.plane_support import PlaneDaemons, make_filesystem
from tests.guest import Boot
from tests.kit import free_port
from tests.vmhost import Netns

pytestmark = [pytest.mark.root, pytest.mark.django_db]
KiB = 1024
RANKS = 8
SCRIPT = """set -e
load nfs
ip link set eth0 up
ip addr add {guest}/24 dev eth0
opts=vers=4.1,nconnect=4,port={port},addr={host},clientaddr={guest}
mkdir -p /mnt/ckpt /mnt/other
mount -t nfs4 -o $opts {host}:{pseudo} /mnt/ckpt
echo MOUNTED $(grep /mnt/ckpt /proc/mounts)
dir=/mnt/ckpt/{rel}
mkdir -p $dir/model $dir/optim
for r in $(seq 0 {last}); do
  (cp /shards/model-$r.bin $dir/model/rank$r.bin; cp /shards/optim-$r.bin $dir/optim/rank$r.bin) &
done
wait
cp /shards/metadata.json $dir/metadata.json
sync
umount /mnt/ckpt
echo WRITTEN
if mount -t nfs4 -o $opts {host}:/other /mnt/other 2>/tmp/err; then
  echo OTHER-MOUNTED; umount /mnt/other
else
  echo OTHER-REFUSED $(cat /tmp/err)
fi
# the same guest from the address /other's rules name: admitted
ip addr del {guest}/24 dev eth0
ip addr add {allowed}/24 dev eth0
mount -t nfs4 -o vers=4.1,port={port},addr={host},clientaddr={allowed} {host}:/other /mnt/other
echo OTHER-FROM-ALLOWED $(grep -c /mnt/other /proc/mounts)
umount /mnt/other
"""


@pytest.fixture
def netns():
    with Netns() as ns:
        yield ns


@pytest.fixture
def nfs_on_link(data_dir, settings, netns):
    """ganesha.nfsd (and smbd) as `strata up --data-host HOST_END` starts them."""
    if not shutil.which("ganesha.nfsd", path=os.environ.get("PATH", "") + ":/usr/sbin"):
        pytest.skip("ganesha.nfsd is not installed")
    os.chmod(data_dir, 0o755)
    options = {"host": "127.0.0.1", "data_host": netns.host_ip, "nfs_port": free_port(),
               "smb_port": free_port()}
    settings.SERVICE_OPTIONS = options
    daemons = PlaneDaemons(data_dir, options).start()
    try:
        yield options
    finally:
        daemons.stop()


def test_guest_kernel_client_writes_a_checkpoint_over_nfs41(guest_image, api, netns,
                                                            nfs_on_link, tmp_path):
    make_filesystem(api, "train")
    make_filesystem(api, "elsewhere")
    guest = netns.guest_ip()
    for fs, pseudo, who in (("train", "/train", guest), ("elsewhere", "/other",
                                                         netns.guest_ip(50))):
        r = api.post("/api/v1/nfs-exports/", {"filesystem": fs, "pseudo": pseudo,
                                              "clients": [f"{who} rw no_root_squash"]},
                     format="json")
        assert r.status_code == 201 and r.json()["state"] == "online", r.json()
    r = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "filesystem": "train"},
                 format="json")
    assert r.status_code == 201, r.json()
    version = begin(api, "llm", 100)
    host, path = version["nfs_path"].split(":", 1)
    assert host == netns.host_ip and path == "/train/llm/step-100"

    shards = {f"{kind}/rank{r}.bin": os.urandom(256 * KiB + r)
              for kind in ("model", "optim") for r in range(RANKS)}
    shards["metadata.json"] = b'{"step": 100, "ranks": %d}' % RANKS
    files = {f"/shards/{name.replace('/rank', '-')}": data for name, data in shards.items()}
    script = SCRIPT.format(guest=guest, allowed=netns.guest_ip(50), host=host, port=nfs_on_link["nfs_port"],
                           pseudo="/train", rel=path[len("/train/"):], last=RANKS - 1)
    initrd = guest_image.initrd_with(script, files, tag="nfs")
    tap = netns.add_tap()
    argv = guest_image.boot_args(initrd) + [
        "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
        "-device", "virtio-net-pci,netdev=n0,romfile="]
    with Boot(argv, tmp_path / "nfs.log", timeout=300, netns=netns.name) as vm:
        vm.wait()
        mounted = vm.marker("MOUNTED")
        assert " nfs4 " in mounted and "vers=4.1" in mounted and "nconnect=4" in mounted
        assert "OTHER-MOUNTED" not in vm.output()
        assert vm.marker("OTHER-REFUSED")
        assert vm.marker("OTHER-FROM-ALLOWED") == "1"

    manifest = [{"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                for name, data in shards.items()]
    r = commit(api, "llm", version, manifest)
    assert r.status_code == 200 and r.json()["state"] == "committed", r.json()
    latest = api.get("/api/v1/checkpoint-jobs/llm/latest/")
    assert latest.status_code == 200 and latest.json()["step"] == 100, latest.json()
