"""NFS and SMB on a ceph pool: Ganesha serves a CephFS file system through FSAL_CEPH
(libcephfs, no local mount in its path) and Samba shares the same file system through the
pool's ceph-fuse mount; bytes written by each client read back by hash, directories list
over NFS (the export's root included), and a CephFS snapshot is seen by both under
``.snapshots``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from services.file.runtime import CephExportSource, NfsClientRule, NfsExport, SmbShare
from tests.ceph_fs_support import cephfs_pool

from .nfs_client import connect, ganesha_epoch, listdir, read_hash, sha, write_file
from .smb_client import SmbProtocolClient, smbclient

MiB = 1 << 20


@pytest.fixture
def files(ceph_cluster, scratch):
    with cephfs_pool(ceph_cluster, Path(scratch)) as fs:
        yield fs


def _source(files, name):
    return CephExportSource(conf=files.conf, client=files.client,
                            filesystem=files.filesystem_name(),
                            path=f"{files.pool_root('p')}/fs/{name}")


def test_nfs_through_fsal_ceph_writes_reads_and_shows_snapshots(files, nfs_factory):
    pytest.importorskip("nfs_rs")
    fs = files.create_filesystem("p", "data")
    export = NfsExport(1, fs.path, "/data", [NfsClientRule("127.0.0.1", "rw", "no_root_squash")],
                       ceph=_source(files, "data"))
    server = nfs_factory([export])
    assert "Name = CEPH;" in Path(server.conf_path).read_text()
    payload = os.urandom(24 * MiB + 5)
    with connect(server.settings.port, "/data") as client:
        client.mkdir("ckpt")
        write_file(client, "ckpt/shard-0", payload)
        assert read_hash(client, "ckpt/shard-0") == (len(payload), sha(payload))
        client.mkdir("ckpt/rank1")
        assert listdir(client, "ckpt") == ["rank1", "shard-0"]
        assert listdir(client, ".") == ["ckpt"]
    # the same bytes in the CephFS, seen through the pool's ceph-fuse mount
    assert sha(Path(fs.path, "ckpt", "shard-0").read_bytes()) == sha(payload)
    files.create_snapshot("p", "data", "s1")
    with connect(server.settings.port, "/data") as client:
        write_file(client, "ckpt/shard-0", b"changed")
        assert read_hash(client, ".snapshots/s1/ckpt/shard-0") == (len(payload), sha(payload))
        assert read_hash(client, "ckpt/shard-0")[0] == len(b"changed")


def test_smb_over_the_ceph_fuse_mount(files, smb_factory, smb_users, scratch):
    fs = files.create_filesystem("p", "share")
    server = smb_factory([SmbShare("ckpt", fs.path, encrypt=True)])
    user, password = smb_users(server)
    files.set_filesystem_access("p", "share", mode=0o777)
    data = os.urandom(16 * MiB)
    local = os.path.join(scratch, "shard.bin")
    Path(local).write_bytes(data)
    done = smbclient(server, "ckpt", user, password,
                     f"put {local} cli.bin; get cli.bin {local}.back", encrypt=True)
    assert done.returncode == 0, done.stderr + done.stdout
    assert sha(Path(local + ".back").read_bytes()) == sha(data)
    assert sha(Path(fs.path, "cli.bin").read_bytes()) == sha(data)
    with SmbProtocolClient(server, user, password, encrypt=True) as client:
        client.write("ckpt", "py.bin", data)
        assert client.read_hash("ckpt", "py.bin") == (len(data), hashlib.sha256(data).hexdigest())
        files.create_snapshot("p", "share", "s1")
        assert client.read_hash("ckpt", ".snapshots/s1/py.bin")[1] == sha(data)


def test_two_servers_of_one_export_share_grace_and_bytes(files, nfs_factory, ceph_cluster):
    """Active-active: two Ganesha servers (two nodes' worth) serve the same CephFS export
    with the rados_cluster recovery backend and one grace database. A shard written through
    one reads back through the other at once. One killed (kill -9) and declared dead
    (``GraceDb.start``, what the plane does when it marks a node down): the survivor enforces
    grace. The dead one started again under its node id reclaims and lifts it, and both serve
    the bytes written before."""
    pytest.importorskip("nfs_rs")
    import secrets

    from services.file.runtime.specs import NfsCluster

    fs = files.create_filesystem("p", "shared")
    export = NfsExport(1, fs.path, "/shared",
                       [NfsClientRule("127.0.0.1", "rw", "no_root_squash")],
                       ceph=_source(files, "shared"))
    tag = secrets.token_hex(3)

    pool = f"strata-test-nfs-{tag}"
    ceph_cluster.command("osd pool create", pool=pool, pg_num=8)

    def member(nodeid):
        return NfsCluster(conf=files.conf, client=files.client, pool=pool,
                          namespace="ganesha", nodeid=nodeid)

    try:
        _two_servers(files, nfs_factory, export, member)
    finally:
        ceph_cluster.command("osd pool rm", pool=pool, pool2=pool,
                             yes_i_really_really_mean_it=True)


def _two_servers(files, nfs_factory, export, member):
    import signal

    from services.file.runtime.grace import GraceDb
    from tests.kit import wait_for

    grace = GraceDb(member("a"))
    grace.add("a", "b")
    settings = {"lease_seconds": 10, "grace_seconds": 10}
    a = nfs_factory([export], cluster=member("a"), **settings)
    b = nfs_factory([export], cluster=member("b"), **settings)
    assert "RecoveryBackend = rados_cluster;" in Path(a.conf_path).read_text()
    # client, session and state IDs are made from a server's epoch: two servers of one
    # cluster started in the same second must not share it (each has its own byte)
    epochs = {s.settings.cluster.nodeid: ganesha_epoch(s.log_path) for s in (a, b)}
    assert epochs["a"] != epochs["b"], epochs
    assert {e & 0xFF for e in epochs.values()} == {member(n).epoch_tag for n in "ab"}, epochs
    wait_for(lambda: not grace.dump().in_grace, 90, "the grace of the first start to end")

    payload = os.urandom(8 * MiB + 3)
    with connect(a.settings.port, "/shared") as client:
        write_file(client, "shard-0", payload)
    with connect(b.settings.port, "/shared") as client:
        assert read_hash(client, "shard-0") == (len(payload), sha(payload))

    a.signal(signal.SIGKILL)
    wait_for(lambda: not a.is_running(), 30, "ganesha a to die")
    grace.start("a")
    state = grace.dump()
    assert state.in_grace and state.needs("a"), state
    wait_for(lambda: grace.dump().enforcing("b"), 30, "the survivor to enforce grace")

    a.start([export])                        # the node comes back under its node id
    wait_for(lambda: not grace.dump().in_grace, 120, "grace to be lifted")
    for server in (a, b):
        with connect(server.settings.port, "/shared") as client:
            assert read_hash(client, "shard-0") == (len(payload), sha(payload))
