"""A file system on a Ceph pool served by the cluster's nodes, real processes only: a plane
(`strata plane`) and two node agents (127.0.0.2 and 127.0.0.3) as in tests/test_cluster.py,
on the session's Ceph cluster (so this module is in the ceph group of tests/parallel.py; it
keeps its own Redis database, ``STRATA_CLUSTER_CEPH_TEST_REDIS_DB``, apart from
test_cluster.py's, which may run at the same time on the other worker).

The node assigned the file service fetches the pool's Ceph client files from the plane,
Ganesha (FSAL_CEPH) listens on the node's data address, an export made through the API
afterwards reaches the node (the placement revision), and nfs-rs writes and reads back through
it; a drain moves the file service to the other node, where the bytes read back."""
import os
import uuid

import pytest

from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from tests.ceph import ceph_pool_body
from tests.cluster_support import Cluster
from tests.kit import free_port, wait_for
from plumbing.process import port_open

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


def file_options() -> dict:
    """Ports of its own for a node's Ganesha and smbd."""
    return {"nfs_port": free_port(), "smb_port": free_port()}


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


def test_a_ceph_file_system_is_served_by_its_node_and_follows_a_drain(cluster, ceph_cluster):
    pool, fs = f"cl-{uuid.uuid4().hex[:6]}", "shared"
    made = cluster.api("POST", "pools/", json=ceph_pool_body(
        ceph_cluster, pool, redundancy="replicated:3", failure_domain="host"))
    assert made.status_code == 201, made.text
    export_id = None
    try:
        assert cluster.api("POST", "filesystems/", json={"name": fs, "pool": pool}) \
            .status_code == 201
        alpha_opts, beta_opts = file_options(), file_options()
        assert cluster.api("PATCH", "nodes/alpha/", json={
            "services": ["file"], "options": alpha_opts}).status_code == 200
        assert cluster.api("PATCH", "nodes/beta/", json={
            "services": [], "options": beta_opts}).status_code == 200
        ganesha_running(cluster, "alpha")
        # the pool's client files, handed over by the plane, kept 0600 by the node
        files = cluster.agent_data("alpha") / "ceph" / pool
        wait_for(lambda: (files / "keyring").exists(), 30, "alpha's copy of the pool's key",
                 interval=0.5)
        assert {oct(p.stat().st_mode & 0o777) for p in files.iterdir()} == {"0o600"}
        assert oct(files.stat().st_mode & 0o777) == "0o700"

        # an export made afterwards: the plane bumps the nodes' revision, alpha reconciles
        made = cluster.api("POST", "nfs-exports/", json={
            "filesystem": fs, "pseudo": "/shared", "clients": ["127.0.0.0/8 rw no_root_squash"]})
        assert made.status_code == 201, made.text
        export_id = made.json()["id"]
        placement = cluster.api("GET", "nodes/placement/").json()
        entry = next(e for e in placement["filesystems"] if e["name"] == fs)
        assert (entry["driver"], entry["nodes"]) == ("ceph", ["alpha"])
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

        drained = cluster.cli("node", "drain", "alpha")
        assert drained.returncode == 0 and "file -> beta" in drained.stdout, drained.stderr
        ganesha_running(cluster, "beta")
        read_back(ADDRESSES["beta"], beta_opts["nfs_port"], "/shared", payload)
        wait_for(lambda: cluster.node("alpha")["daemons"], 30, "alpha's daemons stopped",
                 interval=0.5, until=lambda d: d == {})
        assert not port_open(ADDRESSES["alpha"], alpha_opts["nfs_port"])
        entry = next(e for e in cluster.api("GET", "nodes/placement/").json()["filesystems"]
                     if e["name"] == fs)
        assert entry["nodes"] == ["beta"]
    finally:
        if export_id is not None:
            cluster.api("DELETE", f"nfs-exports/{export_id}/")
        cluster.api("DELETE", f"filesystems/{fs}/")
        cluster.api("DELETE", f"pools/{pool}/")
