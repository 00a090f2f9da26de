"""Bad input and faults for the local (btrfs) driver: each refused with the right error and
nothing changed; a degraded mirror keeps serving; scrub; quotas; restart."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataplane_support import (file_sha, loops_under, make_state_dir, sha,  # noqa: E402
                               teardown_state_dir)

from dataplane import (Cancelled, DeviceSpec, InsufficientDevices, InUse,  # noqa: E402
                       InvalidArgument, LocalDriver, Offline, local_available)

pytestmark = pytest.mark.root
MiB = 1 << 20


@pytest.fixture
def state():
    ok, why = local_available()
    if not ok:
        pytest.skip(f"local driver unavailable: {why}")
    path = make_state_dir()
    drv = LocalDriver(path)
    try:
        yield drv, path
    finally:
        teardown_state_dir(drv, path)


def snapshot_of_state(drv, path):
    """Everything a failed call must leave unchanged: loops, files, records, mounts."""
    rel = [p.relative_to(path).parts for p in Path(path).rglob("*")]
    # the insides of mounted pools are checked by each test itself
    files = sorted("/".join(r) for r in rel if not (r[0] == "pools" and len(r) > 2))
    with open("/proc/self/mountinfo") as f:
        mounts = sorted(line.split()[4] for line in f if path in line)
    return (sorted(loops_under(path)), files, drv.list_pools(), mounts)


def image(n=1, size="256M"):
    return [DeviceSpec(f"image:{size}", fault_domain=f"fd{i}") for i in range(n)]


def test_too_few_devices_for_redundancy(state):
    drv, path = state
    before = snapshot_of_state(drv, path)
    for redundancy, given, need in (("mirror", 1, 2), ("mirror3", 2, 3), ("raid10", 3, 4)):
        with pytest.raises(InsufficientDevices) as exc:
            drv.create_pool("p", image(given), redundancy=redundancy)
        assert f"at least {need}" in str(exc.value) and exc.value.code == "insufficient_devices"
        assert snapshot_of_state(drv, path) == before


def test_bad_pool_arguments_change_nothing(state):
    drv, path = state
    before = snapshot_of_state(drv, path)
    for kwargs in ({"redundancy": "raid5"}, {"media": "tape"}):
        with pytest.raises(InvalidArgument):
            drv.create_pool("p", image(1), **kwargs)
    with pytest.raises(InvalidArgument) as exc:
        drv.create_pool("p", image(1, size="10M"))
    assert "MiB" in str(exc.value)
    with pytest.raises(InvalidArgument):
        drv.create_pool("p", [DeviceSpec(path)])  # a directory, not a block device
    with pytest.raises(InvalidArgument):
        drv.create_pool("Bad/Name", image(1))
    assert snapshot_of_state(drv, path) == before


def test_device_already_in_use(state):
    drv, path = state
    info = drv.create_pool("p1", image(1))
    member = info.devices[0].path
    before = snapshot_of_state(drv, path)
    with pytest.raises(InUse) as exc:
        drv.create_pool("p2", [DeviceSpec(member)])
    assert member in str(exc.value) and exc.value.code == "in_use"
    assert snapshot_of_state(drv, path) == before

    # a device that carries a file system signature (not mounted) is refused too
    img = Path(path) / "foreign.img"
    with open(img, "wb") as f:
        f.truncate(200 * MiB)
    loop = subprocess.run(["losetup", "-f", "--show", str(img)], capture_output=True,
                          text=True, check=True).stdout.strip()
    try:
        subprocess.run(["mkfs.btrfs", "-q", "-f", loop], check=True, capture_output=True)
        before = snapshot_of_state(drv, path)
        with pytest.raises(InUse) as exc:
            drv.create_pool("p3", [DeviceSpec(loop)])
        assert loop in str(exc.value) and "signature" in str(exc.value)
        assert snapshot_of_state(drv, path) == before
    finally:
        subprocess.run(["btrfs", "device", "scan", "--forget", loop], capture_output=True)
        subprocess.run(["losetup", "-d", loop], capture_output=True)


def test_quota_larger_than_pool(state):
    drv, path = state
    drv.create_pool("p", image(1))
    size = drv.pool_info("p").size_bytes
    with pytest.raises(InvalidArgument) as exc:
        drv.create_filesystem("p", "big", quota_bytes=size + 1)
    assert "larger than pool" in str(exc.value)
    assert drv.list_filesystems("p") == []
    with pytest.raises(InvalidArgument):
        drv.create_filesystem("p", "neg", quota_bytes=-5)
    assert drv.list_filesystems("p") == []


def test_destroy_pool_holding_objects_is_refused(state):
    drv, path = state
    drv.create_pool("p", image(1))
    fs = drv.create_filesystem("p", "fs")
    (Path(fs.path) / "f").write_bytes(b"keep me")
    drv.create_volume("p", "vol", 8 * MiB)
    before = snapshot_of_state(drv, path)
    with pytest.raises(InUse) as exc:
        drv.destroy_pool("p")
    assert "'fs'" in str(exc.value) and "'vol'" in str(exc.value)
    assert snapshot_of_state(drv, path) == before
    assert (Path(fs.path) / "f").read_bytes() == b"keep me"
    # an inactive pool holding objects is refused as well, and stays inactive
    drv.deactivate_pool("p")
    with pytest.raises(InUse):
        drv.destroy_pool("p")
    assert drv.pool_info("p").health == "offline"
    assert loops_under(path) == []
    drv.activate_pool("p")
    drv.delete_filesystem("p", "fs")
    drv.delete_volume("p", "vol")
    drv.destroy_pool("p")
    assert drv.list_pools() == [] and loops_under(path) == []
    assert list((Path(path) / "devices").iterdir()) == []


def test_mirror_keeps_serving_with_one_device_gone(state):
    drv, path = state
    info = drv.create_pool("m", image(2), redundancy="mirror")
    assert info.health == "online" and len(info.devices) == 2
    fs = drv.create_filesystem("m", "data")
    payload = os.urandom(8 * MiB)
    (Path(fs.path) / "blob").write_bytes(payload)
    vol = drv.create_volume("m", "disk", 16 * MiB)
    with open(vol.path, "r+b") as f:
        f.write(payload)
    drv.deactivate_pool("m")
    assert loops_under(path) == []
    os.unlink(info.devices[1].backing)  # the second disk is gone for good

    info = drv.activate_pool("m")
    assert info.health == "degraded"
    assert [d.state for d in info.devices] == ["online", "missing"]
    assert file_sha(Path(fs.path) / "blob") == sha(payload)
    with open(vol.path, "rb") as f:
        assert sha(f.read(len(payload))) == sha(payload)


def test_non_redundant_pool_with_missing_device_does_not_mount(state):
    drv, path = state
    info = drv.create_pool("s", image(1))
    drv.deactivate_pool("s")
    os.rename(info.devices[0].backing, info.devices[0].backing + ".away")
    try:
        with pytest.raises(InsufficientDevices):
            drv.activate_pool("s")
        assert loops_under(path) == [] and drv.pool_info("s").health == "offline"
        with pytest.raises(Offline):
            drv.list_filesystems("s")
    finally:
        os.rename(info.devices[0].backing + ".away", info.devices[0].backing)


def test_scrub_healthy_pool_reports_progress_and_no_errors(state):
    drv, path = state
    drv.create_pool("m", image(2), redundancy="mirror")
    fs = drv.create_filesystem("m", "data")
    (Path(fs.path) / "blob").write_bytes(os.urandom(16 * MiB))
    os.sync()
    seen = []
    result = drv.scrub_pool("m", progress=lambda pct, msg, **counts: seen.append((pct, counts)))
    assert result.errors_corrected == 0 and result.errors_uncorrectable == 0
    assert result.bytes_scrubbed >= 16 * MiB
    assert seen and seen[-1][0] == 100.0
    assert all(0 <= p <= 100 for p, _ in seen)
    assert seen[-1][1] == {"done": result.bytes_scrubbed, "total": result.bytes_scrubbed}
    with pytest.raises(Cancelled):
        drv.scrub_pool("m", should_cancel=lambda: True)


def test_write_past_quota_fails_with_edquot_and_keeps_earlier_data(state):
    drv, path = state
    drv.create_pool("p", image(1))
    fs = drv.create_filesystem("p", "q", quota_bytes=8 * MiB)
    keep = os.urandom(2 * MiB)
    (Path(fs.path) / "keep").write_bytes(keep)
    os.sync()
    fd = os.open(Path(fs.path) / "big", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError) as exc:
        try:
            for _ in range(64):
                os.write(fd, os.urandom(MiB))
            os.fsync(fd)
        finally:
            os.close(fd)
    assert exc.value.errno == errno.EDQUOT
    assert sha((Path(fs.path) / "keep").read_bytes()) == sha(keep)
    # raising the quota lets writes go on
    drv.set_filesystem_quota("p", "q", 64 * MiB)
    (Path(fs.path) / "more").write_bytes(b"x" * MiB)


def test_pool_survives_restart(state):
    drv, path = state
    drv.create_pool("p", image(1))
    fs = drv.create_filesystem("p", "fs", quota_bytes=32 * MiB)
    data = os.urandom(3 * MiB)
    (Path(fs.path) / "f").write_bytes(data)
    vol = drv.create_volume("p", "v", 8 * MiB)
    with open(vol.path, "r+b") as f:
        f.seek(MiB)
        f.write(data)
    drv.create_snapshot("p", "filesystem", "fs", "s1")
    drv.deactivate_pool("p")
    assert drv.pool_info("p").health == "offline" and loops_under(path) == []

    drv2 = LocalDriver(path)  # a new process after a restart
    assert drv2.list_pools() == ["p"]
    assert drv2.activate_pool("p").health == "online"
    assert drv2.activate_pool("p").health == "online"  # idempotent
    assert (Path(fs.path) / "f").read_bytes() == data
    assert (Path(fs.path) / ".snapshots" / "s1" / "f").read_bytes() == data
    with open(vol.path, "rb") as f:
        f.seek(MiB)
        assert f.read(len(data)) == data
    assert drv2.filesystem_info("p", "fs").quota_bytes == 32 * MiB
