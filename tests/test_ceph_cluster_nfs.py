"""Active-active NFS on the cluster's nodes, real processes only: a plane and two node agents
(127.0.0.2 and 127.0.0.3, as tests/test_ceph_cluster.py) both assigned the file service, on
the session's Ceph cluster (ceph group of tests/parallel.py; its own Redis database,
``STRATA_CLUSTER_CEPH_TEST_REDIS_DB``).

Both nodes' Ganesha servers (FSAL_CEPH, ``rados_cluster`` recovery) are members of one grace
database, in the Ceph pool's RADOS pool under namespace ``strata-nfs-grace``, reached with
each node's own cephx key. A shard written through alpha reads back through beta; the
export's API lists both entries and their mount commands. alpha killed -9 (agent and every
daemon): once the plane writes it down, it puts the cluster in grace for alpha's clients
and beta enforces it; one grace period later the plane gives up alpha's need (still down),
grace ends and a new client reads the shard through beta; alpha drained and removed, it
leaves the grace database and beta still serves."""
import os
import re
import time
import uuid

import pytest

from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from tests.ceph import ceph_pool_body
from tests.cluster_support import Cluster
from tests.kit import free_port, wait_for

pytestmark = pytest.mark.root
pytest.importorskip("nfs_rs")

REDIS_DB = os.environ.get("STRATA_CLUSTER_CEPH_TEST_REDIS_DB", "4")
ADDRESSES = {"alpha": "127.0.0.2", "beta": "127.0.0.3"}
GRACE = 10          # seconds: each server's own grace and lease, short for the test


@pytest.fixture(scope="module")
def cluster(ceph_cluster):
    """The plane with a Ceph pool and a file system on it; alpha and beta serving files."""
    c = Cluster(redis_db=REDIS_DB).create()
    pool = f"nfs-{uuid.uuid4().hex[:6]}"
    c.pool, c.ports = pool, {}
    try:
        c.start_plane()
        made = c.api("POST", "pools/", json=ceph_pool_body(
            ceph_cluster, pool, redundancy="replicated:3", failure_domain="host"))
        assert made.status_code == 201, made.text
        assert c.api("POST", "filesystems/", json={"name": "ckpt", "pool": pool}) \
            .status_code == 201
        for name, address in ADDRESSES.items():
            assert c.join(name, address).returncode == 0
            c.run_agent(name)
        for name in ADDRESSES:
            c.wait_state(name, "up", timeout=60)
            c.ports[name] = free_port()
            done = c.api("PATCH", f"nodes/{name}/", json={"services": ["file"], "options": {
                "nfs_port": c.ports[name], "smb_port": free_port(),
                "nfs_grace_seconds": GRACE, "nfs_lease_seconds": GRACE}})
            assert done.status_code == 200, done.text
        for name in ADDRESSES:
            wait_for(lambda n=name: c.node(n)["daemons"], 120, f"{name}'s ganesha running",
                     interval=0.5,
                     until=lambda d: (d.get("ganesha") or {}).get("state") == "running")
        yield c
    finally:
        try:
            for export in c.api("GET", "nfs-exports/").json().get("results", []):
                c.api("DELETE", f"nfs-exports/{export['id']}/")
            c.api("DELETE", "filesystems/ckpt/")
            c.api("DELETE", f"pools/{pool}/")
        except Exception as exc:      # the plane may be gone: its cluster is deleted anyway
            print(f"clean-up through the API: {exc}")
        c.destroy()


def grace_db(cluster, ceph_cluster):
    """The grace database alpha's Ganesha was configured with, read with the admin key."""
    from services.file.runtime import NfsCluster
    from services.file.runtime.grace import GraceDb

    conf = (cluster.agent_data("alpha") / "run" / "nfs" / "ganesha.conf").read_text()
    kv = conf[conf.index("RADOS_KV"):]
    pool = re.search(r'\bpool = "?([^";]+)"?;', kv).group(1)
    namespace = re.search(r'\bnamespace = "?([^";]+)"?;', kv).group(1)
    assert namespace == "strata-nfs-grace"
    assert "RecoveryBackend = rados_cluster;" in conf
    return GraceDb(NfsCluster(conf=str(ceph_cluster.conf), client=ceph_cluster.client,
                              pool=pool, namespace=namespace, nodeid="test"))


def read_back(address: str, port: int, payload: bytes, timeout: float = 120) -> None:
    def answers():
        with connect(port, "/ckpt", host=address) as client:
            return read_hash(client, "shard-0")
    got = wait_for(answers, timeout, f"shard-0 read back through {address}:{port}",
                   interval=1, ignore=(Exception,))
    assert got == (len(payload), sha(payload))


def test_both_nodes_serve_one_export_and_a_dead_node_puts_the_other_in_grace(
        cluster, ceph_cluster):
    grace = grace_db(cluster, ceph_cluster)
    state = wait_for(grace.dump, 120, "both servers members, first grace over", interval=1,
                     until=lambda s: set(s.members) == set(ADDRESSES) and not s.in_grace)
    # (a server's E flag may outlive the grace it enforced: only the need counts)
    assert not any(state.needs(name) for name in ADDRESSES), state

    made = cluster.api("POST", "nfs-exports/", json={
        "filesystem": "ckpt", "pseudo": "/ckpt", "clients": ["127.0.0.0/8 rw no_root_squash"]})
    assert made.status_code == 201, made.text
    export = made.json()
    # the entries: one per node, with its data address and Ganesha port, and mount commands
    entries = {e["node"]: e for e in export["entries"]}
    assert set(entries) == set(ADDRESSES)
    for name, address in ADDRESSES.items():
        port = cluster.ports[name]
        assert (entries[name]["address"], entries[name]["port"]) == (address, port)
        assert entries[name]["mount"] == (f"mount -t nfs -o vers=4.1,nconnect=4,port={port} "
                                          f"{address}:/ckpt /mnt/ckpt")
    assert export["recommended"] in export["entries"]
    assert export["mount"]["linux"] == export["recommended"]["mount"]
    shown = cluster.cli("nfs-export", "show", str(export["id"]))
    assert shown.returncode == 0, shown.stderr
    assert entries["beta"]["mount"] in shown.stdout

    payload = os.urandom(4 * 2**20 + 7)

    def write():
        with connect(cluster.ports["alpha"], "/ckpt", host=ADDRESSES["alpha"]) as client:
            write_file(client, "shard-0", payload)
        return True
    wait_for(write, 120, "a write through alpha's Ganesha", interval=1, ignore=(Exception,))
    read_back(ADDRESSES["beta"], cluster.ports["beta"], payload)

    # alpha dies: its agent and every daemon it ran, kill -9
    cluster.kill_node("alpha")
    killed = time.monotonic()
    cluster.wait_state("alpha", "down", timeout=60)
    down = time.monotonic() - killed
    state = wait_for(grace.dump, 60, "the cluster in grace for alpha", interval=0.5,
                     until=lambda s: s.in_grace and s.needs("alpha"))
    started = time.monotonic() - killed
    wait_for(grace.dump, 60, "beta enforcing grace", interval=0.5,
             until=lambda s: s.enforcing("beta"))
    print(f"kill -9 to alpha down: {down:.1f} s; to grace started: {started:.1f} s; "
          f"to beta enforcing: {time.monotonic() - killed:.1f} s")
    assert cluster.api("GET", f"nfs-exports/{export['id']}/").json()["recommended"][
        "node"] == "beta"
    # alpha's clients had their grace period: the plane gives up its need while it is still
    # down, and beta takes new opens again (the cluster does not wait for an operator)
    wait_for(grace.dump, 90, "grace over with alpha still down", interval=1,
             until=lambda s: not s.in_grace and "alpha" in s.members)
    print(f"kill -9 to grace over: {time.monotonic() - killed:.1f} s")
    read_back(ADDRESSES["beta"], cluster.ports["beta"], payload)

    # alpha taken out of the cluster: its need given up, grace ends, beta serves new clients
    assert cluster.cli("node", "drain", "alpha").returncode == 0
    removed = cluster.cli("node", "remove", "alpha")
    assert removed.returncode == 0, removed.stderr
    wait_for(grace.dump, 90, "grace over without alpha", interval=1,
             until=lambda s: not s.in_grace and "alpha" not in s.members)
    read_back(ADDRESSES["beta"], cluster.ports["beta"], payload)
