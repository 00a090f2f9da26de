"""Native CephFS keys through the plane, used by real Ceph clients on the session's
development cluster: libcephfs (as a GPU host's ceph-fuse or kernel client would) and
librados (a client that skips the MDS and reads objects itself), authenticated with the
keyring the API's answer describes. A key for file system A writes and reads A; it is
refused on B and cannot read B's objects from the OSDs; a read-only key cannot write; a
revoked key is refused; A's quota stops the key's writes (EDQUOT) within the overshoot
dataplane/README.md states; the shown ceph-fuse command mounts A."""
from __future__ import annotations

import contextlib
import errno
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dataplane.ceph import bindings
from dataplane.errors import CommandFailed
from tests.ceph import plane_ceph_pool

pytestmark = [pytest.mark.root, pytest.mark.django_db]
MiB = 1 << 20
ROOT = Path(__file__).resolve().parent.parent
QUOTA = 32 * MiB
# what dataplane/README.md promises: a client passes the quota by at most this much
OVERSHOOT = 8 * MiB


@pytest.fixture
def two_filesystems(api, ceph_cluster, data_dir):
    """Pool name with file systems ``alpha`` (32 MiB quota) and ``beta``, each holding a
    file written by the plane's own mount; deleted through the API after (which revokes
    their keys)."""
    pool = f"ck-{uuid.uuid4().hex[:6]}"
    with plane_ceph_pool(api, ceph_cluster, pool):
        made = []
        try:
            for name, quota in (("alpha", QUOTA), ("beta", None)):
                fs = api.post("/api/v1/filesystems/", {"name": name, "pool": pool,
                                                       "quota_bytes": quota}, format="json")
                assert fs.status_code == 201, fs.json()
                made.append(name)
                Path(fs.json()["path"], "hello.txt").write_bytes(f"{name} data".encode())
            yield pool
        finally:
            for name in made:
                assert api.delete(f"/api/v1/filesystems/{name}/").status_code == 204


def make_key(api, fs: str, name: str, read_only: bool = False) -> dict:
    answer = api.post(f"/api/v1/filesystems/{fs}/ceph-keys/",
                      {"name": name, "read_only": read_only}, format="json")
    assert answer.status_code == 201, answer.json()
    return answer.json()


def write_keyring(key: dict, where: Path) -> Path:
    """The keyring file a host writes from the answer (as the mount instructions say)."""
    keyring = where / f"{key['entity']}.keyring"
    keyring.write_text(key["mount"]["keyring"]["content"].replace("<SECRET>", key["secret"]))
    keyring.chmod(0o600)
    return keyring


@contextlib.contextmanager
def native_mount(cluster, key: dict, keyring: Path, root: str):
    """A libcephfs client of ``key`` with ``root`` as its root (ceph-fuse's -r)."""
    cephfs = bindings.load("cephfs")
    handle = cephfs.LibCephFS(conffile=str(cluster.conf),
                              auth_id=key["entity"].split(".", 1)[1])
    handle.conf_set("keyring", str(keyring))
    handle.conf_set("client_mount_timeout", "10")
    try:
        handle.mount(mount_root=root.encode(), filesystem_name=key["ceph_filesystem"].encode())
        yield handle
    finally:
        handle.shutdown()


@contextlib.contextmanager
def rados_client(cluster, key: dict, keyring: Path):
    rados = bindings.load("rados")
    conn = rados.Rados(conffile=str(cluster.conf), name=key["entity"],
                       conf={"keyring": str(keyring)})
    conn.connect(timeout=10)
    try:
        yield conn
    finally:
        conn.shutdown()


def write(handle, path: str, data: bytes) -> None:
    fd = handle.open(path.encode(), "w", 0o644)
    try:
        handle.write(fd, data, 0)
        handle.fsync(fd, 0)
    finally:
        handle.close(fd)


def read(handle, path: str) -> bytes:
    fd = handle.open(path.encode(), "r", 0)
    try:
        return handle.read(fd, 0, 1 << 20)
    finally:
        handle.close(fd)


def refusals():
    """What libcephfs raises for EPERM and EACCES."""
    cephfs = bindings.load("cephfs")
    return cephfs.PermissionError, cephfs.PermissionDenied


def first_object(path: Path) -> str:
    """The RADOS object of a file's first 4 MiB: ``<inode in hex>.00000000``."""
    return f"{os.stat(path).st_ino:x}.00000000"


def data_pool_of(key: dict) -> str:
    return dict(p.split("=", 1) for p in key["caps"]["osd"].split()[2:])["pool"]


def test_a_key_reaches_its_file_system_only(api, ceph_cluster, two_filesystems, tmp_path):
    cephfs, rados = bindings.load("cephfs"), bindings.load("rados")
    key = make_key(api, "alpha", "gpu")
    assert key["entity"] == "client.strata.alpha.gpu" and len(key["secret"]) == 40
    assert key["show_once"]["secret"] == key["secret"]
    listed = api.get("/api/v1/filesystems/alpha/ceph-keys/").json()
    assert [k["name"] for k in listed] == ["gpu"] and "secret" not in listed[0]
    assert key["path"].endswith("/fs/alpha")
    keyring = write_keyring(key, tmp_path)
    beta_path = key["path"].rsplit("/", 1)[0] + "/beta"

    with native_mount(ceph_cluster, key, keyring, key["path"]) as alpha:
        assert read(alpha, "/hello.txt") == b"alpha data"
        write(alpha, "/shard-0.bin", b"x" * MiB)
        assert read(alpha, "/shard-0.bin") == b"x" * MiB
    alpha_dir = Path(api.get("/api/v1/filesystems/alpha/").json()["path"])
    assert (alpha_dir / "shard-0.bin").read_bytes() == b"x" * MiB   # the plane sees it

    # the MDS refuses B's tree: nothing of it can be opened or listed
    with pytest.raises(refusals()):
        with native_mount(ceph_cluster, key, keyring, beta_path) as beta:
            read(beta, "/hello.txt")

    # and the OSDs refuse B's objects (and the shared default namespace) to a client that
    # skips the MDS: only alpha's namespace is readable
    beta_dir = Path(api.get("/api/v1/filesystems/beta/").json()["path"])
    with rados_client(ceph_cluster, key, keyring) as conn:
        ioctx = conn.open_ioctx(data_pool_of(key))
        try:
            ioctx.set_namespace("strata-fs-alpha")
            assert ioctx.read(first_object(alpha_dir / "hello.txt")) == b"alpha data"
            for namespace in ("strata-fs-beta", ""):
                ioctx.set_namespace(namespace)
                with pytest.raises(rados.PermissionError):
                    ioctx.read(first_object(beta_dir / "hello.txt"))
        finally:
            ioctx.close()

    # revoked: Ceph no longer knows the key, a new mount is refused
    assert api.delete("/api/v1/filesystems/alpha/ceph-keys/gpu/").status_code == 204
    assert api.get("/api/v1/filesystems/alpha/ceph-keys/").json() == []
    with pytest.raises(cephfs.Error):
        with native_mount(ceph_cluster, key, keyring, key["path"]):
            pass


def test_a_read_only_key_reads_and_cannot_write(api, ceph_cluster, two_filesystems, tmp_path):
    key = make_key(api, "alpha", "reader", read_only=True)
    assert key["caps"]["mds"].startswith("allow r ") and ",ro," in key["mount"]["kernel"] + ","
    keyring = write_keyring(key, tmp_path)
    with native_mount(ceph_cluster, key, keyring, key["path"]) as alpha:
        assert read(alpha, "/hello.txt") == b"alpha data"
        with pytest.raises(refusals()):
            write(alpha, "/new.bin", b"no")
        with pytest.raises(refusals()):
            write(alpha, "/hello.txt", b"overwritten")
        assert read(alpha, "/hello.txt") == b"alpha data"


def test_the_quota_holds_for_native_clients(api, ceph_cluster, two_filesystems, tmp_path):
    """Chunks of 1 MiB into several files until the client refuses (EDQUOT): it must refuse,
    and not later than OVERSHOOT past the quota."""
    cephfs = bindings.load("cephfs")
    key = make_key(api, "alpha", "writer")
    keyring = write_keyring(key, tmp_path)
    written, refused = 0, None
    with native_mount(ceph_cluster, key, keyring, key["path"]) as alpha:
        for i in range(3 * QUOTA // MiB):
            try:
                fd = alpha.open(f"/part-{i // 4}.bin".encode(), os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    alpha.write(fd, b"q" * MiB, (i % 4) * MiB)
                    alpha.fsync(fd, 0)
                finally:
                    alpha.close(fd)
            except cephfs.Error as exc:
                refused = exc
                break
            written += MiB
    assert refused is not None and getattr(refused, "errno", None) == errno.EDQUOT, refused
    print(f"quota {QUOTA // MiB} MiB: the native client wrote {written / MiB:.0f} MiB "
          "before EDQUOT")
    assert QUOTA - 2 * MiB <= written <= QUOTA + OVERSHOOT


def test_the_shown_ceph_fuse_command_mounts_the_file_system(api, ceph_cluster,
                                                             two_filesystems, tmp_path):
    """Run ceph-fuse as the key's mount instructions say (keyring and mountpoint moved into
    the test's folder; ceph.conf for the cluster's options, as a host has one); revoking the
    key cuts the mounted client off."""
    key = make_key(api, "alpha", "fuse")
    keyring = write_keyring(key, tmp_path)
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    argv = shlex.split(key["mount"]["fuse"])
    argv[argv.index("-k") + 1] = str(keyring)
    argv[-1] = str(mountpoint)
    argv[1:1] = ["-c", str(ceph_cluster.conf)]
    subprocess.run(argv, check=True, timeout=60)
    try:
        assert (mountpoint / "hello.txt").read_bytes() == b"alpha data"
        (mountpoint / "from-fuse.txt").write_bytes(b"native")
        assert sorted(os.listdir(mountpoint)) == ["from-fuse.txt", "hello.txt"]
        # revoked while mounted: the client is evicted at once, its next write fails
        assert api.delete("/api/v1/filesystems/alpha/ceph-keys/fuse/").status_code == 204
        after = subprocess.run(["timeout", "60", "sh", "-c",
                                f"echo late > {mountpoint}/late.txt && sync {mountpoint}/late.txt"],
                               capture_output=True, text=True)
        assert after.returncode not in (0, 124), after   # refused (ESHUTDOWN), not hung
        alpha_dir = Path(api.get("/api/v1/filesystems/alpha/").json()["path"])
        assert not (alpha_dir / "late.txt").exists()
    finally:
        subprocess.run(["umount", str(mountpoint)], check=False)
        subprocess.run(["umount", "-l", str(mountpoint)], check=False, capture_output=True)


def test_keys_are_refused_on_a_local_pool_and_for_bad_names(api, two_filesystems, data_dir,
                                                            client):
    from django.contrib.auth.models import User

    pool = api.post("/api/v1/pools/", {"name": "plain", "driver": "directory"}, format="json")
    assert pool.status_code == 201, pool.json()
    fs = api.post("/api/v1/filesystems/", {"name": "local-fs", "pool": "plain"}, format="json")
    assert fs.status_code == 201, fs.json()
    answer = api.post("/api/v1/filesystems/local-fs/ceph-keys/", {"name": "k"}, format="json")
    assert answer.status_code == 409
    assert answer.json()["error"] == "no_native_access"
    assert "ceph pools" in answer.json()["detail"]
    client.force_login(User.objects.get(username="admin"))
    page = client.get("/console/filesystems/local-fs/").content.decode()
    assert "data-no-native" in page and "over NFS or SMB" in page
    bad = api.post("/api/v1/filesystems/alpha/ceph-keys/", {"name": "Bad Name!"}, format="json")
    assert bad.status_code == 400 and "name" in bad.json()["fields"]
    make_key(api, "alpha", "twice")
    again = api.post("/api/v1/filesystems/alpha/ceph-keys/", {"name": "twice"}, format="json")
    assert again.status_code == 409


@pytest.mark.django_db(transaction=True)
def test_cli_and_console(api, ceph_cluster, two_filesystems, live_server, client):
    """`strata fs key create|list|revoke` against the plane; the file system's console page
    lists the key with its mount commands; once revoked, Ceph no longer knows it."""
    from django.contrib.auth.models import User

    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/", "STRATA_TOKEN": api.token}

    def strata(*args) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "console.cli.main", *args], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=120)

    made = strata("fs", "key", "create", "alpha", "ranks", "--read-only")
    assert made.returncode == 0, made.stderr
    secret = ceph_cluster.command("auth get", entity="client.strata.alpha.ranks")[0]["key"]
    assert secret in made.stdout                       # shown once, here
    assert "mount -t ceph" in made.stdout and "ceph-fuse --id strata.alpha.ranks" in made.stdout
    listed = strata("fs", "key", "list", "alpha")
    assert "client.strata.alpha.ranks" in listed.stdout and secret not in listed.stdout

    client.force_login(User.objects.get(username="admin"))
    page = client.get("/console/filesystems/alpha/").content.decode()
    assert "client.strata.alpha.ranks" in page and "mount -t ceph" in page
    assert secret not in page

    wrong = strata("fs", "key", "create", "no-such-fs", "k")
    assert wrong.returncode == 1 and "404" in wrong.stderr and len(wrong.stderr.splitlines()) == 1
    assert strata("fs", "key", "revoke", "alpha", "ranks").returncode == 0
    with pytest.raises(CommandFailed):
        ceph_cluster.command("auth get", entity="client.strata.alpha.ranks")
