"""A file system on a Ceph pool served by the cluster's nodes, real processes only: a plane
(`strata plane`) and two node agents (127.0.0.2 and 127.0.0.3) as in tests/test_cluster.py,
on the session's Ceph cluster (so this module is in the ceph group of tests/parallel.py; it
keeps its own Redis database, ``STRATA_CLUSTER_CEPH_TEST_REDIS_DB``, apart from
test_cluster.py's, which may run at the same time on the other worker).

The node assigned the file and block services fetches the pool's Ceph client files from the
plane, with a cephx key of its own (removed with the node); Ganesha (FSAL_CEPH) and qemu-storage-daemon (rbd) listen on the node's data address;
an NFS export and an NBD export made through the API afterwards reach the node (the
placement revision; the plane runs no data daemons and only records them), and nfs-rs and
nbdcopy write and read back through them; a drain moves both services to the other node,
where the bytes read back."""
import errno
import hashlib
import json
import os
import subprocess
import uuid

import pytest

from dataplane.errors import CommandFailed
from plumbing.process import port_open
from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from tests.ceph import ceph_pool_body
from tests.cluster_support import Cluster
from tests.kit import free_port, wait_for

pytestmark = pytest.mark.root
pytest.importorskip("nfs_rs")

REDIS_DB = os.environ.get("STRATA_CLUSTER_CEPH_TEST_REDIS_DB", "4")
ADDRESSES = {"alpha": "127.0.0.2", "beta": "127.0.0.3"}


@pytest.fixture(scope="module")
def cluster(ceph_cluster):
    c = Cluster(redis_db=REDIS_DB).create()
    try:
        c.start_plane()
        for name, address in ADDRESSES.items():
            assert c.join(name, address).returncode == 0
            c.run_agent(name)
        for name in ADDRESSES:
            c.wait_state(name, "up", timeout=60)
        yield c
    finally:
        c.destroy()


def data_options() -> dict:
    """Ports of its own for a node's Ganesha, smbd, tgtd and qemu-storage-daemon, and a short
    NFS grace: the node that takes over after the drain starts in grace (its Ganesha joins the
    cluster's grace database), and opens wait it out (90 s by default, 10 s here)."""
    return {"nfs_port": free_port(), "smb_port": free_port(), "iscsi_port": free_port(),
            "nbd_port": free_port(), "spdk": "off", "nfs_grace_seconds": 10,
            "nfs_lease_seconds": 10}


def nbd_round_trip(uri: str, src, out) -> str:
    """Read the export back into ``out`` with nbdcopy; its SHA-256."""
    cp = subprocess.run(["nbdcopy", uri, str(out)], capture_output=True, text=True,
                        timeout=120)
    assert cp.returncode == 0, cp.stderr
    return hashlib.sha256(out.read_bytes()).hexdigest()


def ganesha_running(cluster, name: str) -> dict:
    return wait_for(lambda: cluster.node(name), 120, f"{name}'s ganesha running", interval=0.5,
                    until=lambda n: n["daemons"].get("ganesha", {}).get("state") == "running")


def read_back(address: str, port: int, pseudo: str, payload: bytes) -> None:
    def answers():
        with connect(port, pseudo, host=address) as client:
            return read_hash(client, "shard-0")
    got = wait_for(answers, 90, f"{pseudo} read back through {address}:{port}", interval=1,
                   ignore=(Exception,))
    assert got == (len(payload), sha(payload))


def test_a_ceph_file_system_and_volume_are_served_by_their_node_and_follow_a_drain(
        cluster, ceph_cluster, tmp_path):
    pool, fs, vol = f"cl-{uuid.uuid4().hex[:6]}", "shared", "disk"
    made = cluster.api("POST", "pools/", json=ceph_pool_body(
        ceph_cluster, pool, redundancy="replicated:3", failure_domain="host"))
    assert made.status_code == 201, made.text
    export_id = block_id = None
    try:
        assert cluster.api("POST", "filesystems/", json={"name": fs, "pool": pool}) \
            .status_code == 201
        assert cluster.api("POST", "volumes/", json={"name": vol, "pool": pool,
                                                     "size_bytes": 8 * 2**20}).status_code == 201
        alpha_opts, beta_opts = data_options(), data_options()
        assert cluster.api("PATCH", "nodes/alpha/", json={
            "services": ["file", "block"], "options": alpha_opts}).status_code == 200
        assert cluster.api("PATCH", "nodes/beta/", json={
            "services": [], "options": beta_opts}).status_code == 200
        ganesha_running(cluster, "alpha")
        # the pool's client files, handed over by the plane, kept 0600 by the node
        files = cluster.agent_data("alpha") / "ceph" / pool
        wait_for(lambda: (files / "keyring").exists(), 30, "alpha's copy of the pool's key",
                 interval=0.5)
        assert {oct(p.stat().st_mode & 0o777) for p in files.iterdir()} == {"0o600"}
        assert oct(files.stat().st_mode & 0o777) == "0o700"
        # the node's own key, not the pool's admin key
        client = json.loads((files / "pool.json").read_text())["client"]
        assert client == f"strata-node.alpha.{pool}"
        assert (files / "keyring").read_text().startswith(f"[client.{client}]")
        # whose MDS cap is the pool's directory: the CephFS above it is out of reach
        assert cephfs_listing(files, client, f"/strata/{pool}") == "ok"
        assert cephfs_listing(files, client, "/strata") == "refused"

        # an export made afterwards: the plane bumps the nodes' revision, alpha reconciles
        made = cluster.api("POST", "nfs-exports/", json={
            "filesystem": fs, "pseudo": "/shared", "clients": ["127.0.0.0/8 rw no_root_squash"]})
        assert made.status_code == 201, made.text
        export_id = made.json()["id"]
        placement = cluster.api("GET", "nodes/placement/").json()
        entry = next(e for e in placement["filesystems"] if e["name"] == fs)
        assert (entry["driver"], entry["nodes"]) == ("ceph", ["alpha"])
        entry = next(e for e in placement["volumes"] if e["name"] == vol)
        assert entry["nodes"] == ["alpha"]
        assert fs in cluster.node("alpha")["serves"]["filesystems"]
        assert f"filesystems: {fs}" in cluster.cli("node", "show", "alpha").stdout
        assert cluster.node("beta")["serves"] == {"filesystems": [], "volumes": []}

        payload = os.urandom(4 * 2**20 + 7)

        def write():
            with connect(alpha_opts["nfs_port"], "/shared", host=ADDRESSES["alpha"]) as client:
                write_file(client, "shard-0", payload)
            return True
        wait_for(write, 90, "a write through alpha's Ganesha", interval=1, ignore=(Exception,))
        read_back(ADDRESSES["alpha"], alpha_opts["nfs_port"], "/shared", payload)
        # it listens on the node's data address, not on loopback's 127.0.0.1
        assert not port_open("127.0.0.1", alpha_opts["nfs_port"])
        conf = (cluster.agent_data("alpha") / "run" / "nfs" / "ceph.conf").read_text()
        assert f"keyring = {files / 'keyring'}" in conf       # the node's copy, not the plane's

        # an NBD export of the volume: recorded by the plane, made live by alpha
        made = cluster.api("POST", "block-exports/", json={"volume": vol, "protocol": "nbd",
                                                           "allow_any": True})
        assert made.status_code == 201, made.text
        assert made.json()["state"] == "pending"
        block_id, name = made.json()["id"], made.json()["export_id"]
        row = wait_for(lambda: cluster.api("GET", f"block-exports/{block_id}/").json(), 60,
                       "alpha's NBD export online", interval=0.5,
                       until=lambda r: r["state"] == "online")
        uri = f"nbd://{ADDRESSES['alpha']}:{alpha_opts['nbd_port']}/{name}"
        assert row["connection"]["uri"] == uri
        src = tmp_path / "src.bin"
        src.write_bytes(os.urandom(8 * 2**20))
        digest = hashlib.sha256(src.read_bytes()).hexdigest()
        cp = subprocess.run(["nbdcopy", "--flush", str(src), uri], capture_output=True,
                            text=True, timeout=120)
        assert cp.returncode == 0, cp.stderr
        assert nbd_round_trip(uri, src, tmp_path / "alpha.bin") == digest

        drained = cluster.cli("node", "drain", "alpha")
        assert drained.returncode == 0, drained.stderr
        assert "file -> beta" in drained.stdout and "block -> beta" in drained.stdout
        ganesha_running(cluster, "beta")
        read_back(ADDRESSES["beta"], beta_opts["nfs_port"], "/shared", payload)
        uri = f"nbd://{ADDRESSES['beta']}:{beta_opts['nbd_port']}/{name}"
        wait_for(lambda: cluster.api("GET", f"block-exports/{block_id}/").json(), 90,
                 "beta's NBD export online", interval=0.5,
                 until=lambda r: r["connection"].get("uri") == uri and r["state"] == "online")
        assert nbd_round_trip(uri, src, tmp_path / "beta.bin") == digest
        wait_for(lambda: cluster.node("alpha")["daemons"], 30, "alpha's daemons stopped",
                 interval=0.5, until=lambda d: d == {})
        assert not port_open(ADDRESSES["alpha"], alpha_opts["nfs_port"])
        placement = cluster.api("GET", "nodes/placement/").json()
        assert [e["nodes"] for e in placement["filesystems"] + placement["volumes"]
                if e["name"] in (fs, vol)] == [["beta"], ["beta"]]
        # removed from the cluster, alpha's cephx key goes with it
        entity = f"client.strata-node.alpha.{pool}"
        assert ceph_cluster.command("auth get", entity=entity)[0]["entity"] == entity
        assert cluster.cli("node", "remove", "alpha").returncode == 0
        with pytest.raises(CommandFailed):
            ceph_cluster.command("auth get", entity=entity)
    finally:
        clean_up(cluster, export_id, block_id, fs, vol, pool)


def cephfs_listing(files, client: str, path: str) -> str:
    """"ok" when cephx ``client`` (the node's key, its files in ``files``) may mount the
    cluster's CephFS at ``path`` and list it, "refused" when the MDS says no (libcephfs)."""
    import cephfs   # Debian's binding, linked into the venv: only once a cluster runs

    fs = cephfs.LibCephFS(conffile=str(files / "ceph.conf"), auth_id=client,
                          conf={"keyring": str(files / "keyring")})
    try:
        fs.mount(mount_root=path.encode())
        fs.opendir(b"/")
        return "ok"
    except cephfs.Error as e:
        if getattr(e, "errno", None) in (errno.EPERM, errno.EACCES):
            return "refused"
        raise
    finally:
        fs.shutdown()


def clean_up(cluster, export_id, block_id, fs: str, vol: str, pool: str) -> None:
    """Exports first; the volume once the node serving it let go of the image (it drops the
    export at its next heartbeat); then the file system and the pool. A failure here is
    printed, not raised over the test's own."""
    try:
        if export_id is not None:
            cluster.api("DELETE", f"nfs-exports/{export_id}/")
        if block_id is not None:
            cluster.api("DELETE", f"block-exports/{block_id}/")
        wait_for(lambda: cluster.api("DELETE", f"volumes/{vol}/").status_code, 60,
                 "the volume deleted", interval=1, until=lambda code: code in (204, 404))
        cluster.api("DELETE", f"filesystems/{fs}/")
        cluster.api("DELETE", f"pools/{pool}/")
    except Exception as exc:  # noqa: BLE001 - the session's Ceph cluster goes at its end
        print(f"clean-up of pool {pool}: {exc}")
