"""NFS-Ganesha supervised by NfsServer, exercised with the nfs-rs client."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from services.file.runtime import (
    DaemonStartError,
    FilesystemMissing,
    NfsClientRule,
    NfsExport,
    ReloadError,
    resolve_share_path,
)

from .conftest import make_share_dir, make_snapshot, make_subvolume, run
from .nfs_client import connect, error_codes, read_hash, sha, write_file

nfs_rs = pytest.importorskip("nfs_rs")
MiB = 1024 * 1024


def rw(address="127.0.0.1"):
    return [NfsClientRule(address, "rw", "no_root_squash")]


def test_64_mib_written_and_read_back_by_hash(nfs_factory, scratch):
    fs = make_share_dir(scratch, "fs1")
    server = nfs_factory([NfsExport(1, resolve_share_path(fs), "/fs1", rw())])
    data = os.urandom(64 * MiB)
    with connect(server.settings.port, "/fs1") as client:
        client.mkdir("ckpt")
        write_file(client, "ckpt/shard-0", data)
        assert read_hash(client, "ckpt/shard-0") == (len(data), sha(data))
    with open(os.path.join(fs, "ckpt", "shard-0"), "rb") as local:
        assert sha(local.read()) == sha(data)


def test_read_only_export_refuses_writes(nfs_factory, scratch):
    fs = make_share_dir(scratch, "fs1")
    with open(os.path.join(fs, "kept"), "wb") as f:
        f.write(b"before")
    server = nfs_factory([NfsExport(1, fs, "/ro", [NfsClientRule("127.0.0.1", "ro")])])
    with connect(server.settings.port, "/ro") as client:
        with client.open("kept", "rb") as f:
            assert f.read() == b"before"
        with pytest.raises(nfs_rs.NfsError, match="read-only"):
            write_file(client, "new", b"x" * 1000)
        with pytest.raises(nfs_rs.NfsError):
            client.mkdir("newdir")
    assert sorted(os.listdir(fs)) == [".snapshots", "kept"]


def test_adding_and_removing_an_export_while_another_client_writes(nfs_factory, scratch):
    fs_a, fs_b = make_share_dir(scratch, "a"), make_share_dir(scratch, "b")
    export_a = NfsExport(1, fs_a, "/a", rw())
    server = nfs_factory([export_a])
    written, errors, stop = [], [], threading.Event()

    def writer():
        try:
            with connect(server.settings.port, "/a") as client:
                i = 0
                while not stop.is_set() or i < 5:
                    data = os.urandom(MiB)
                    write_file(client, f"part-{i}", data)
                    written.append((f"part-{i}", sha(data)))
                    i += 1
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(written) < 2 and thread.is_alive():
            time.sleep(0.05)
        assert server.apply([export_a, NfsExport(2, fs_b, "/b", rw())]) is True
        with connect(server.settings.port, "/b") as client_b:
            write_file(client_b, "hello", b"through b")
        assert server.apply([export_a]) is True
        with pytest.raises(nfs_rs.NfsError):
            connect(server.settings.port, "/b").close()
        count = len(written)
        while len(written) < count + 2 and thread.is_alive():
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(60)
    assert errors == []
    with open(os.path.join(fs_b, "hello"), "rb") as f:
        assert f.read() == b"through b"
    with connect(server.settings.port, "/a") as client:
        for name, digest in written:
            assert read_hash(client, name)[1] == digest


def test_refused_exports_leave_the_old_config_serving(nfs_factory, scratch):
    fs = make_share_dir(scratch, "fs1")
    good = NfsExport(1, fs, "/fs1", rw())
    server = nfs_factory([good])
    before = Path(server.conf_path).read_text()
    with pytest.raises(FilesystemMissing, match="deleted"):
        server.apply([good, NfsExport(2, os.path.join(scratch, "gone"), "/gone", rw())])
    # /proc passes our checks but Ganesha's VFS cannot export it: the reload itself fails
    with pytest.raises(ReloadError, match="refused the new exports"):
        server.apply([good, NfsExport(3, "/proc/self", "/proc", rw(), snapshots=False)])
    assert Path(server.conf_path).read_text() == before
    assert server.healthy()
    with connect(server.settings.port, "/fs1") as client:
        write_file(client, "still-here", b"ok")
        assert read_hash(client, "still-here") == (2, sha(b"ok"))


def test_an_export_ganesha_refuses_at_start_is_an_error(nfs_factory, scratch):
    fs = make_share_dir(scratch, "fs1")
    with pytest.raises(DaemonStartError, match="refused the exports at start"):
        nfs_factory([NfsExport(1, fs, "/fs1", rw()),
                     NfsExport(2, "/proc/self", "/proc", rw(), snapshots=False)])


@pytest.mark.root
def test_snapshots_are_readable_and_read_only(nfs_factory, btrfs_pool):
    fs = make_subvolume(btrfs_pool, "nfs-snap")
    data = os.urandom(3 * MiB)
    with open(os.path.join(fs, "model.pt"), "wb") as f:
        f.write(data)
    make_snapshot(fs, "x")
    with open(os.path.join(fs, "model.pt"), "wb") as f:
        f.write(b"changed after the snapshot")
    server = nfs_factory([NfsExport(1, fs, "/fs", rw())])
    with connect(server.settings.port, "/fs") as client:
        assert read_hash(client, ".snapshots/x/model.pt") == (len(data), sha(data))
        with pytest.raises(nfs_rs.NfsError):
            write_file(client, ".snapshots/x/new", b"nope")
        # a snapshot taken while serving appears after refresh_snapshots, same client
        write_file(client, "model.pt", data[:MiB])
        make_snapshot(fs, "y")
        server.refresh_snapshots(1)
        assert sorted(client.listdir(".snapshots")) == ["x", "y"]
        assert read_hash(client, ".snapshots/y/model.pt") == (MiB, sha(data[:MiB]))
        write_file(client, "after", b"the writable export was not disturbed")
    assert not os.path.exists(os.path.join(fs, ".snapshots", "x", "new"))


@pytest.mark.root
def test_write_past_the_quota_fails_and_earlier_data_is_intact(nfs_factory, btrfs_pool):
    fs = make_subvolume(btrfs_pool, "nfs-quota")
    run("btrfs", "qgroup", "limit", "24M", fs)
    server = nfs_factory([NfsExport(1, fs, "/fs", rw())])
    first = os.urandom(8 * MiB)
    with connect(server.settings.port, "/fs") as client:
        write_file(client, "first", first)
        run("sync")
        with pytest.raises(nfs_rs.NfsError) as failure:
            write_file(client, "too-big", os.urandom(64 * MiB))
        assert "NFS4ERR_DQUOT" in error_codes(failure.value)
        assert read_hash(client, "first") == (len(first), sha(first))


@pytest.mark.root
def test_client_rule_that_does_not_match_is_refused(nfs_factory, scratch):
    """A second host (network namespace over a veth pair) is refused or limited by its rule."""
    if not os.path.exists("/usr/sbin/ip") and not os.path.exists("/sbin/ip"):
        pytest.skip("iproute2 is not installed")
    tag = os.urandom(2).hex()
    netns, host_if, peer_if = f"strata-t{tag}", f"stv{tag}a", f"stv{tag}b"
    subnet = f"10.{200 + int(tag[:2], 16) % 50}.{int(tag[2:], 16)}"  # noqa: FURB166
    host_ip, peer_ip = f"{subnet}.1", f"{subnet}.2"
    created = []
    try:
        run("ip", "netns", "add", netns)
        created.append("netns")
        run("ip", "link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        created.append("link")
        run("ip", "link", "set", peer_if, "netns", netns)
        run("ip", "addr", "add", f"{host_ip}/24", "dev", host_if)
        run("ip", "link", "set", host_if, "up")
        run("ip", "netns", "exec", netns, "ip", "addr", "add", f"{peer_ip}/24", "dev", peer_if)
        run("ip", "netns", "exec", netns, "ip", "link", "set", peer_if, "up")
        run("ip", "netns", "exec", netns, "ip", "link", "set", "lo", "up")
        # two exports of one file system with different rules
        fs = make_share_dir(scratch, "fs")
        server = nfs_factory([
            NfsExport(1, fs, "/private", rw(host_ip)),
            NfsExport(2, fs, "/shared", rw(host_ip) + [
                NfsClientRule(f"{subnet}.0/24", "ro", "all_squash")]),
        ], bind_address=host_ip)
        port = server.settings.port
        # the host itself matches its rule
        with connect(port, "/private", host=host_ip) as client:
            write_file(client, "readme", b"shared")
        script = (
            "import sys, nfs_rs\n"
            "url = f'nfs://{sys.argv[1]}:{sys.argv[2]}'\n"
            "try:\n"
            "    nfs_rs.Client.connect(url + '/private?version=4.1', connect_timeout=10).close()\n"
            "    print('private: open')\n"
            "except nfs_rs.NfsError as e:\n"
            "    print('private: refused', type(e).__name__)\n"
            "c = nfs_rs.Client.connect(url + '/shared?version=4.1', connect_timeout=10)\n"
            "f = c.open('readme', 'rb'); print('shared read:', f.read().decode()); f.close()\n"
            "try:\n"
            "    f = c.open('new', 'wb'); f.write(b'x'); f.close(); print('shared write: ok')\n"
            "except nfs_rs.NfsError as e:\n"
            "    print('shared write: refused', type(e).__name__)\n"
            "c.close()\n")
        out = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", script,
                              host_ip, str(port)],
            check=False, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "private: refused" in out.stdout
        assert "shared read: shared" in out.stdout
        assert "shared write: refused" in out.stdout
        assert not os.path.exists(os.path.join(fs, "new"))
    finally:
        if "link" in created:
            subprocess.run(["ip", "link", "del", host_if], check=False, capture_output=True)
        if "netns" in created:
            subprocess.run(["ip", "netns", "del", netns], check=False, capture_output=True)


def test_changing_a_client_rule_takes_effect_on_the_live_export(nfs_factory, scratch):
    fs = make_share_dir(scratch, "fs1")
    server = nfs_factory([NfsExport(1, fs, "/fs1", rw())])
    with connect(server.settings.port, "/fs1") as client:
        write_file(client, "before", b"rw")
    assert server.apply([NfsExport(1, fs, "/fs1", [NfsClientRule("127.0.0.1", "ro")])])
    with connect(server.settings.port, "/fs1") as client:
        assert read_hash(client, "before") == (2, sha(b"rw"))
        with pytest.raises(nfs_rs.NfsError, match="read-only"):
            write_file(client, "after", b"ro")
    assert not os.path.exists(os.path.join(fs, "after"))


def test_squash_rules_map_owners(nfs_factory, scratch):
    fs = make_share_dir(scratch, "fs1")
    server = nfs_factory([
        NfsExport(1, fs, "/none", [NfsClientRule("127.0.0.1", "rw", "no_root_squash")]),
        NfsExport(2, fs, "/root", [NfsClientRule("127.0.0.1", "rw", "root_squash")]),
        NfsExport(3, fs, "/all", [NfsClientRule("127.0.0.1", "rw", "all_squash",
                                                anonymous_uid=1234, anonymous_gid=4321)]),
    ])
    for pseudo in ("/none", "/root", "/all"):
        with connect(server.settings.port, pseudo) as client:      # AUTH_SYS uid 0
            write_file(client, pseudo.strip("/"), b"x")
    owners = {name: (os.stat(os.path.join(fs, name)).st_uid, os.stat(os.path.join(fs, name)).st_gid)
              for name in ("none", "root", "all")}
    assert owners == {"none": (0, 0), "root": (65534, 65534), "all": (1234, 4321)}
