"""Compliance suite: every dataplane driver must pass these tests.

Parametrized over ``DRIVER_FACTORIES`` in ``tests/dataplane_support.py``; a new driver joins
by adding a factory there. Drivers that switch a feature off must raise ``Unsupported`` with
a clear message (checked from ``capabilities()["features_off"]``).
"""

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataplane_support import (driver_params, make_state_dir, read_at, sha,  # noqa: E402
                               size_of, teardown_state_dir, write_at)

from dataplane import (AlreadyExists, DataplaneError, FileSystemInfo, InUse,  # noqa: E402
                       InvalidArgument, NotFound, SnapshotInfo, Unsupported, VolumeInfo)

MiB = 1 << 20
A = os.urandom(256 * 1024)
B = os.urandom(256 * 1024)


@pytest.fixture(params=driver_params())
def factory(request):
    why = request.param.skip_reason()
    if why:
        pytest.skip(why)
    return request.param


@pytest.fixture
def driver(factory):
    state = make_state_dir()
    drv = factory.make(state)
    try:
        yield drv
    finally:
        teardown_state_dir(drv, state)


@pytest.fixture
def pool(driver, factory):
    driver.create_pool("p1", factory.pool_devices(1))
    return "p1"


def _off(driver, feature):
    return driver.capabilities()["features_off"].get(feature)


def _need_filesystems(driver):
    """Skip on drivers that serve block volumes only (``capabilities()["filesystems"]``)."""
    if not driver.capabilities().get("filesystems", True):
        pytest.skip(f"{driver.name} has no file systems: {_off(driver, 'filesystems')}")


def _volume_files(driver):
    """True when the test can read and write ``VolumeInfo.path``: a file, or an RBD image
    (through librbd); not an SPDK bdev."""
    return driver.capabilities().get("volume_paths", "file") in ("file", "rbd")


def _expect_unsupported(excinfo_ctx, reason):
    assert excinfo_ctx.value.code == "unsupported"
    assert reason and reason in str(excinfo_ctx.value)


# -- capabilities and pools ---------------------------------------------------------------

def test_capabilities_are_data(driver):
    caps = driver.capabilities()
    json.dumps(caps)
    for key in ("driver", "redundancy", "quotas", "instant_snapshots", "send_receive", "scrub",
                "volumes", "filesystems", "features_off"):
        assert key in caps, key
    assert caps["driver"] == driver.name
    for feature, why in caps["features_off"].items():
        assert isinstance(why, str) and len(why) > 10, feature


def test_pool_create_list_info_destroy(driver, factory):
    info = driver.create_pool("alpha", factory.pool_devices(1), media="capacity")
    assert info.name == "alpha" and info.driver == driver.name
    assert info.health == "online" and info.media == "capacity"
    assert info.size_bytes > 0 and 0 <= info.used_bytes <= info.size_bytes
    assert not info.mountpoint or Path(info.mountpoint).is_dir()
    json.dumps(asdict(info))
    assert driver.list_pools() == ["alpha"]
    with pytest.raises(AlreadyExists):
        driver.create_pool("alpha", factory.pool_devices(1))
    driver.destroy_pool("alpha")
    assert driver.list_pools() == []
    assert not info.mountpoint or not Path(info.mountpoint).exists()
    with pytest.raises(NotFound):
        driver.pool_info("alpha")


@pytest.mark.parametrize("bad", ["", "Upper", "-dash", "a/b", "x" * 64, "..", "a b"])
def test_invalid_names_are_refused(driver, pool, bad):
    with pytest.raises(InvalidArgument):
        driver.create_pool(bad, [])
    with pytest.raises(InvalidArgument):
        driver.create_filesystem(pool, bad)
    with pytest.raises(InvalidArgument):
        driver.create_volume(pool, bad, MiB)
    assert driver.list_filesystems(pool) == [] and driver.list_volumes(pool) == []


def test_missing_objects_raise_not_found(driver, pool):
    for call in (lambda: driver.filesystem_info(pool, "nope"),
                 lambda: driver.volume_info(pool, "nope"),
                 lambda: driver.delete_filesystem(pool, "nope"),
                 lambda: driver.delete_volume(pool, "nope"),
                 lambda: driver.create_snapshot(pool, "volume", "nope", "s"),
                 lambda: driver.list_snapshots(pool, "filesystem", "nope"),
                 lambda: driver.filesystem_info("nopool", "x")):
        with pytest.raises(NotFound):
            call()


# -- file systems -------------------------------------------------------------------------

def test_filesystem_bytes_round_trip(driver, pool):
    _need_filesystems(driver)
    fs = driver.create_filesystem(pool, "data")
    assert isinstance(fs, FileSystemInfo) and fs.quota_bytes is None
    path = Path(fs.path)
    (path / "dir").mkdir()
    payload = os.urandom(3 * MiB + 17)
    (path / "dir" / "blob").write_bytes(payload)
    assert sha((path / "dir" / "blob").read_bytes()) == sha(payload)
    assert driver.list_filesystems(pool) == ["data"]
    with pytest.raises(AlreadyExists):
        driver.create_filesystem(pool, "data")
    driver.delete_filesystem(pool, "data")
    assert driver.list_filesystems(pool) == []
    assert not path.exists()


def test_filesystem_access_sets_owner_group_and_mode_of_the_root(driver, pool):
    _need_filesystems(driver)
    path = Path(driver.create_filesystem(pool, "shared").path)
    driver.set_filesystem_access(pool, "shared", uid=65534, gid=65534, mode=0o2770)
    st = path.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (65534, 65534, 0o2770)
    driver.set_filesystem_access(pool, "shared", mode=0o750)  # the rest is kept
    st = path.stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (65534, 0o750)
    with pytest.raises(InvalidArgument):
        driver.set_filesystem_access(pool, "shared", mode=0o17777)
    with pytest.raises(NotFound):
        driver.set_filesystem_access(pool, "nope", mode=0o755)


def test_filesystem_quota(driver, pool):
    if _off(driver, "quotas"):
        with pytest.raises(Unsupported) as exc:
            driver.create_filesystem(pool, "q", quota_bytes=64 * MiB)
        _expect_unsupported(exc, _off(driver, "quotas"))
        assert driver.list_filesystems(pool) == []
        return
    fs = driver.create_filesystem(pool, "q", quota_bytes=64 * MiB)
    assert fs.quota_bytes == 64 * MiB
    driver.set_filesystem_quota(pool, "q", 32 * MiB)
    assert driver.filesystem_info(pool, "q").quota_bytes == 32 * MiB
    driver.set_filesystem_quota(pool, "q", None)
    assert driver.filesystem_info(pool, "q").quota_bytes is None
    size = driver.pool_info(pool).size_bytes
    with pytest.raises(InvalidArgument):
        driver.set_filesystem_quota(pool, "q", size * 2)


# -- volumes ------------------------------------------------------------------------------

def test_volume_bytes_at_offsets_and_resize(driver, pool):
    vol = driver.create_volume(pool, "disk", 64 * MiB)
    assert isinstance(vol, VolumeInfo) and vol.size_bytes == 64 * MiB
    files = _volume_files(driver)
    chunks = {0: os.urandom(4096), MiB + 123: os.urandom(5000), 64 * MiB - 4096: os.urandom(4096)}
    if files:
        assert size_of(vol.path) == 64 * MiB
        for off, data in chunks.items():
            write_at(vol.path, off, data)
        for off, data in chunks.items():
            assert read_at(vol.path, off, len(data)) == data
    assert driver.list_volumes(pool) == ["disk"]

    grown = driver.resize_volume(pool, "disk", 128 * MiB)
    assert grown.size_bytes == 128 * MiB == driver.volume_info(pool, "disk").size_bytes
    for off, data in chunks.items() if files else ():
        assert read_at(vol.path, off, len(data)) == data
    with pytest.raises(InvalidArgument) as exc:
        driver.resize_volume(pool, "disk", 32 * MiB)
    assert "shrink" in str(exc.value)
    assert driver.volume_info(pool, "disk").size_bytes == 128 * MiB
    with pytest.raises(AlreadyExists):
        driver.create_volume(pool, "disk", MiB)
    driver.delete_volume(pool, "disk")
    assert driver.list_volumes(pool) == []


# -- snapshots ----------------------------------------------------------------------------

def test_volume_snapshot_keeps_old_bytes(driver, pool):
    vol = driver.create_volume(pool, "disk", 16 * MiB)
    files = _volume_files(driver)
    if files:
        write_at(vol.path, MiB, A)
    snap = driver.create_snapshot(pool, "volume", "disk", "s1")
    assert isinstance(snap, SnapshotInfo) and snap.kind == "volume" and snap.source == "disk"
    if files:
        write_at(vol.path, MiB, B)
        assert read_at(snap.path, MiB, len(A)) == A
        assert read_at(vol.path, MiB, len(B)) == B
        assert size_of(snap.path) == 16 * MiB
        with pytest.raises(OSError):
            write_at(snap.path, 0, b"x")
    assert [s.name for s in driver.list_snapshots(pool, "volume", "disk")] == ["s1"]
    with pytest.raises(AlreadyExists):
        driver.create_snapshot(pool, "volume", "disk", "s1")
    driver.delete_snapshot(pool, "volume", "disk", "s1")
    assert driver.list_snapshots(pool, "volume", "disk") == []


def test_filesystem_snapshot_visible_and_read_only(driver, pool):
    _need_filesystems(driver)
    fs = driver.create_filesystem(pool, "home")
    f = Path(fs.path) / "file"
    f.write_bytes(A)
    snap = driver.create_snapshot(pool, "filesystem", "home", "before")
    f.write_bytes(B)
    seen = Path(fs.path) / ".snapshots" / "before"
    assert Path(snap.path) == seen
    assert (seen / "file").read_bytes() == A
    assert f.read_bytes() == B
    with pytest.raises(OSError):
        (seen / "file").write_bytes(b"x")
    with pytest.raises(OSError):
        (seen / "new").write_bytes(b"x")
    assert [s.name for s in driver.list_snapshots(pool, "filesystem", "home")] == ["before"]
    driver.create_snapshot(pool, "filesystem", "home", "after")
    assert [s.name for s in driver.list_snapshots(pool, "filesystem", "home")] == [
        "before", "after"]
    driver.delete_filesystem(pool, "home")  # takes its snapshots with it
    assert driver.list_filesystems(pool) == []


@pytest.mark.parametrize("kind", ["filesystem", "volume"])
def test_clone_is_writable_and_independent(driver, pool, kind):
    if kind == "filesystem":
        _need_filesystems(driver)
        src = Path(driver.create_filesystem(pool, "src").path) / "f"
        src.write_bytes(A)
    else:
        src = Path(driver.create_volume(pool, "src", 8 * MiB).path)
        if not _volume_files(driver):
            return _clone_without_files(driver, pool)
        write_at(src, 0, A)
    driver.create_snapshot(pool, kind, "src", "s1")
    clone = driver.clone_snapshot(pool, kind, "src", "s1", "copy")
    path = Path(clone.path) / "f" if kind == "filesystem" else Path(clone.path)
    assert read_at(path, 0, len(A)) == A
    write_at(path, 0, B)
    assert read_at(src, 0, len(A)) == A
    write_at(src, 0, os.urandom(len(A)))
    assert read_at(path, 0, len(B)) == B
    assert driver.list_snapshots(pool, kind, "copy") == []
    with pytest.raises(AlreadyExists):
        driver.clone_snapshot(pool, kind, "src", "s1", "copy")
    if not driver.capabilities().get("clones_depend_on_snapshot", True):
        driver.delete_snapshot(pool, kind, "src", "s1")
        assert read_at(path, 0, len(B)) == B


def _clone_without_files(driver, pool):
    """The clone checks that need no byte access (volumes that are not files)."""
    driver.create_snapshot(pool, "volume", "src", "s1")
    clone = driver.clone_snapshot(pool, "volume", "src", "s1", "copy")
    assert isinstance(clone, VolumeInfo) and clone.size_bytes == 8 * MiB
    assert driver.list_volumes(pool) == ["copy", "src"]
    assert driver.list_snapshots(pool, "volume", "copy") == []
    with pytest.raises(AlreadyExists):
        driver.clone_snapshot(pool, "volume", "src", "s1", "copy")
    if driver.capabilities().get("clones_depend_on_snapshot", True):
        # the snapshot and its volume stay while the clone depends on them
        for call in (lambda: driver.delete_snapshot(pool, "volume", "src", "s1"),
                     lambda: driver.delete_volume(pool, "src")):
            with pytest.raises(InUse, match="copy"):
                call()
        assert [s.name for s in driver.list_snapshots(pool, "volume", "src")] == ["s1"]
        driver.delete_volume(pool, "copy")
    driver.delete_snapshot(pool, "volume", "src", "s1")
    driver.delete_volume(pool, "src")
    if not driver.capabilities().get("clones_depend_on_snapshot", True):
        assert driver.volume_info(pool, "copy").size_bytes == 8 * MiB


# -- send / receive -----------------------------------------------------------------------

def _write_source(driver, pool, kind, data):
    if kind == "filesystem":
        path = Path(driver.filesystem_info(pool, "src").path) / "f"
        path.write_bytes(data)
        return path
    path = driver.volume_info(pool, "src").path
    write_at(path, 2 * MiB, data)
    return path


def _read_snapshot(snap, kind):
    if kind == "filesystem":
        return (Path(snap.path) / "f").read_bytes()
    return read_at(snap.path, 2 * MiB, len(A))


@pytest.mark.parametrize("kind", ["filesystem", "volume"])
def test_send_receive_full_and_incremental(driver, pool, factory, kind):
    if kind == "filesystem":
        _need_filesystems(driver)
        driver.create_filesystem(pool, "src")
    else:
        driver.create_volume(pool, "src", 8 * MiB)
    if kind == "filesystem" or _volume_files(driver):
        _write_source(driver, pool, kind, A)
    driver.create_snapshot(pool, kind, "src", "s1")
    reason = _off(driver, "send_receive")
    if reason:
        with pytest.raises(Unsupported) as exc:
            b"".join(driver.send_snapshot(pool, kind, "src", "s1"))
        _expect_unsupported(exc, reason)
        with pytest.raises(Unsupported):
            driver.receive_snapshot(pool, kind, "dst", [b"x"], "s1")
        return

    driver.create_pool("p2", factory.pool_devices(1))
    full = b"".join(driver.send_snapshot(pool, kind, "src", "s1"))
    got = driver.receive_snapshot("p2", kind, "dst", [full[i:i + 65536]
                                                      for i in range(0, len(full), 65536)], "r1")
    assert got.name == "r1" and got.source == "dst"
    assert _read_snapshot(got, kind) == A
    # the target did not exist: it was created holding the received snapshot's content
    if kind == "filesystem":
        assert (Path(driver.filesystem_info("p2", "dst").path) / "f").read_bytes() == A
    else:
        assert driver.volume_info("p2", "dst").size_bytes == 8 * MiB
        assert read_at(driver.volume_info("p2", "dst").path, 2 * MiB, len(A)) == A
    _write_source(driver, pool, kind, B)
    driver.create_snapshot(pool, kind, "src", "s2")
    inc = b"".join(driver.send_snapshot(pool, kind, "src", "s2", parent="s1"))
    # B replaced every byte A wrote: an increment carrying just the changed bytes (RBD) is
    # then the size of the full stream, plus its parent's identity
    assert len(inc) < len(full) + 512 or kind == "filesystem"
    got2 = driver.receive_snapshot("p2", kind, "dst", iter([inc]), "r2")
    assert _read_snapshot(got2, kind) == B
    assert _read_snapshot(driver.list_snapshots("p2", kind, "dst")[0], kind) == A
    assert [s.name for s in driver.list_snapshots("p2", kind, "dst")] == ["r1", "r2"]

    # a truncated stream raises and leaves neither a snapshot nor a new target behind
    whole = b"".join(driver.send_snapshot(pool, kind, "src", "s2"))
    for cut in (len(whole) // 2, len(whole) - 1, 20):
        with pytest.raises(DataplaneError):
            driver.receive_snapshot("p2", kind, "fresh", [whole[:cut]], "r1")
        with pytest.raises(DataplaneError):
            driver.receive_snapshot("p2", kind, "dst", [whole[:cut]], "r3")
    assert [s.name for s in driver.list_snapshots("p2", kind, "dst")] == ["r1", "r2"]
    lister = driver.list_filesystems if kind == "filesystem" else driver.list_volumes
    assert lister("p2") == ["dst"]
    mountpoint = driver.pool_info("p2").mountpoint
    assert not mountpoint or not [p for p in Path(mountpoint).rglob(".incoming-*")]
    # a corrupt stream is refused
    bad = bytearray(full)
    bad[len(bad) // 2] ^= 0xFF
    with pytest.raises(DataplaneError):
        driver.receive_snapshot("p2", kind, "dst", [bytes(bad)], "r4")
    assert [s.name for s in driver.list_snapshots("p2", kind, "dst")] == ["r1", "r2"]
    # an incremental stream whose parent is not in the pool is refused
    driver.delete_snapshot("p2", kind, "dst", "r1")
    with pytest.raises(NotFound):
        driver.receive_snapshot("p2", kind, "other", [inc], "x")
    assert lister("p2") == ["dst"]
    assert [s.name for s in driver.list_snapshots("p2", kind, "dst")] == ["r2"]


# -- features that are off ----------------------------------------------------------------

def test_features_off_raise_unsupported(driver, factory, pool):
    off = driver.capabilities()["features_off"]
    if "scrub" in off:
        with pytest.raises(Unsupported) as exc:
            driver.scrub_pool(pool)
        _expect_unsupported(exc, off["scrub"])
    else:
        result = driver.scrub_pool(pool)
        assert result.errors_uncorrectable == 0
    if "redundancy" in off:
        with pytest.raises(Unsupported) as exc:
            driver.create_pool("mirrored", factory.pool_devices(2), redundancy="mirror")
        _expect_unsupported(exc, off["redundancy"])
        assert "mirrored" not in driver.list_pools()
    if "quotas" in off and driver.capabilities().get("filesystems", True):
        driver.create_filesystem(pool, "fs")
        with pytest.raises(Unsupported) as exc:
            driver.set_filesystem_quota(pool, "fs", MiB)
        _expect_unsupported(exc, off["quotas"])
        assert driver.filesystem_info(pool, "fs").quota_bytes is None


# -- failback: send from a promoted clone, rollback in place, re-base the replica ----------

@pytest.mark.parametrize("kind", ["filesystem", "volume"])
def test_failback_cycle(driver, pool, factory, kind):
    """A replicates to B; B promotes a clone and writes; B's increment goes back on top of
    A's own snapshot; A rolls back to it in place; B re-bases its replica on a copy of that
    snapshot, and A's next increment applies there (with B's original gone)."""
    if kind == "filesystem":
        _need_filesystems(driver)
        driver.create_filesystem(pool, "src")
    else:
        driver.create_volume(pool, "src", 8 * MiB)
    off = _off(driver, "send_receive")
    if off:
        driver.create_snapshot(pool, kind, "src", "s1")
        if _off(driver, "rollback"):
            with pytest.raises(Unsupported) as exc:
                driver.rollback(pool, kind, "src", "s1")
            _expect_unsupported(exc, _off(driver, "rollback"))
        with pytest.raises(Unsupported):
            driver.copy_snapshot(pool, kind, "src", "s1", "src", "copy")
        return
    src = _write_source(driver, pool, kind, A)
    driver.create_snapshot(pool, kind, "src", "s1")

    def move(src_pool, source, snap, dst_pool, target, parent=None, parent_source=None):
        data = b"".join(driver.send_snapshot(src_pool, kind, source, snap, parent,
                                             parent_source=parent_source))
        return driver.receive_snapshot(dst_pool, kind, target, [data], snap), len(data)

    driver.create_pool("p2", factory.pool_devices(1))
    _, full = move(pool, "src", "s1", "p2", "dst")
    # failover on B: a writable clone of the received snapshot, then writes there
    live = driver.clone_snapshot("p2", kind, "dst", "s1", "live")
    if kind == "filesystem":
        (Path(live.path) / "f").write_bytes(B)
        (Path(live.path) / "new-on-b").write_bytes(b"b")
    else:
        write_at(live.path, 2 * MiB, B)
    driver.create_snapshot("p2", kind, "live", "f1")
    # failback: B's increment is based on the received s1, which A has as its own s1
    got, size = move("p2", "live", "f1", pool, "src", parent="s1", parent_source="dst")
    # the volume's only bytes are the ones B changed: an increment that carries just the
    # changed bytes (RBD) is then the size of a full stream, plus its parent's identity
    assert size < full + 512 or kind == "filesystem"
    assert _read_snapshot(got, kind) == B
    # A wrote after the common snapshot: keep that in a snapshot, then roll back in place
    _write_source(driver, pool, kind, os.urandom(len(A)))
    driver.create_snapshot(pool, kind, "src", "kept")
    in_files = kind == "filesystem" or not str(src).startswith("rbd:")
    before = in_files and os.stat(driver.filesystem_info(pool, "src").path
                                  if kind == "filesystem" else src)
    info = driver.rollback(pool, kind, "src", "f1")
    assert info.path == (str(Path(src).parent) if kind == "filesystem" else src)
    if kind == "filesystem":
        assert (Path(info.path) / "f").read_bytes() == B
        assert (Path(info.path) / "new-on-b").read_bytes() == b"b"
        assert not list(Path(info.path).glob(".rollback-*"))
    else:
        assert read_at(src, 2 * MiB, len(B)) == B and info.size_bytes == 8 * MiB
    assert not in_files or os.stat(info.path).st_ino == before.st_ino  # in place
    assert {s.name for s in driver.list_snapshots(pool, kind, "src")} == {"s1", "f1", "kept"}
    assert _read_snapshot(driver.list_snapshots(pool, kind, "src")[-1], kind) != B
    with pytest.raises(NotFound):
        driver.rollback(pool, kind, "src", "nope")
    if kind == "filesystem":  # a rollback cut short (crash) is completed by running it again
        (Path(info.path) / ".rollback-dead").mkdir()
        (Path(info.path) / ".rollback-dead" / "f").write_bytes(b"half")
        (Path(info.path) / "f").unlink()
        driver.rollback(pool, kind, "src", "f1")
        # (CephFS keeps its snapshot directory out of directory listings)
        assert sorted(p.name for p in Path(info.path).iterdir()
                      if p.name != ".snapshots") == ["f", "new-on-b"]
        assert (Path(info.path) / "f").read_bytes() == B
    # B re-bases its replica on a copy of f1; its original (and the clone) can go
    driver.copy_snapshot("p2", kind, "live", "f1", "dst", "f1")
    driver.delete_snapshot("p2", kind, "live", "f1")
    (driver.delete_filesystem if kind == "filesystem" else driver.delete_volume)("p2", "live")
    with pytest.raises(AlreadyExists):
        driver.copy_snapshot("p2", kind, "dst", "f1", "dst", "f1")
    # forward replication resumes incrementally from f1: only the small change travels
    small = os.urandom(4096)
    if kind == "filesystem":
        (Path(info.path) / "g").write_bytes(small)
    else:
        write_at(src, 5 * MiB, small)
    driver.create_snapshot(pool, kind, "src", "s2")
    got, size = move(pool, "src", "s2", "p2", "dst", parent="f1")
    assert size < full // 4, (size, full)
    assert _read_snapshot(got, kind) == B
    if kind == "filesystem":
        assert (Path(got.path) / "g").read_bytes() == small
    else:
        assert read_at(got.path, 5 * MiB, 4096) == small


def test_incremental_send_of_bind_mounted_snapshots(driver, pool, factory):
    """An NFS export bind-mounts a btrfs file system and its snapshots onto themselves;
    incremental sends must still work (plain `btrfs send -p` refuses them)."""
    if driver.name != "local":
        pytest.skip("bind mounts of snapshots are made for local (btrfs) pools only")
    import subprocess
    fs = Path(driver.create_filesystem(pool, "src").path)
    (fs / "f").write_bytes(A)
    s1 = driver.create_snapshot(pool, "filesystem", "src", "s1").path
    (fs / "g").write_bytes(B)
    s2 = driver.create_snapshot(pool, "filesystem", "src", "s2").path
    mounted = []
    try:
        for path in (str(fs), s1, s2):
            subprocess.run(["mount", "--bind", path, path], check=True)
            mounted.append(path)
        full = b"".join(driver.send_snapshot(pool, "filesystem", "src", "s1"))
        inc = b"".join(driver.send_snapshot(pool, "filesystem", "src", "s2", parent="s1"))
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", path], check=True)
    assert not [line for line in open("/proc/self/mounts") if ".send-root" in line]
    driver.create_pool("p2", factory.pool_devices(1))
    driver.receive_snapshot("p2", "filesystem", "dst", [full], "s1")
    got = driver.receive_snapshot("p2", "filesystem", "dst", [inc], "s2")
    assert (Path(got.path) / "g").read_bytes() == B and (Path(got.path) / "f").read_bytes() == A


@pytest.mark.parametrize("kind", ["filesystem", "volume"])
def test_changed_since_a_snapshot(driver, pool, kind):
    """What was written after a snapshot is listed by path: a failback uses it to say what
    the promoted copy got after the snapshot it brought back. Drivers without send
    streams say they cannot."""
    if kind == "filesystem":
        _need_filesystems(driver)
        path = Path(driver.create_filesystem(pool, "src").path)
        (path / "model").mkdir()
        (path / "model" / "a").write_bytes(A)
        (path / "keep").write_bytes(A)
        (path / "b").write_bytes(A)
    else:
        driver.create_volume(pool, "src", 8 * MiB)
    driver.create_snapshot(pool, kind, "src", "s1")
    if _off(driver, "send_receive"):
        with pytest.raises(Unsupported):
            driver.changed_since(pool, kind, "src", "s1")
        return
    assert driver.changed_since(pool, kind, "src", "s1") == []
    if kind == "filesystem":
        (path / "model" / "a").unlink()
        (path / "model" / "new file").write_bytes(B)
        with open(path / "b", "ab") as fh:
            fh.write(B)
        (path / "dir").mkdir()
        want = ["b", "dir", "model/a", "model/new file"]
    else:
        vol = driver.volume_info(pool, "src")
        write_at(vol.path, MiB, B)
        # a volume in a file is named by its file; an RBD image by its name
        want = [vol.name] if vol.path.startswith("rbd:") else [Path(vol.path).name]
    assert driver.changed_since(pool, kind, "src", "s1") == want
    # the probe snapshot it takes is gone again
    assert [s.name for s in driver.list_snapshots(pool, kind, "src")] == ["s1"]
    with pytest.raises(NotFound):
        driver.changed_since(pool, kind, "src", "no-such")
