"""Active-active NFS on the cluster's nodes, real processes only: a plane and two node agents
(127.0.0.2 and 127.0.0.3, as tests/test_ceph_cluster.py) both assigned the file service, on
the session's Ceph cluster (ceph group of tests/parallel.py; its own Redis database,
``STRATA_CLUSTER_CEPH_TEST_REDIS_DB``).

Both nodes' Ganesha servers (FSAL_CEPH, ``rados_cluster`` recovery) are members of one grace
database, in the Ceph pool's RADOS pool under namespace ``strata-nfs-grace``, reached with
each node's own cephx key. A shard written through alpha reads back through beta; the
export's API lists both entries and their mount commands. alpha killed -9 (agent and every
daemon): once the plane writes it down, it fences alpha's CephFS clients, puts the cluster in
grace for alpha's clients and gives up alpha's need at once (no survivor can take their
reclaims, services/file/grace.py): grace ends with alpha still a member and a new client
reads the shard through beta; a late takeover's grace for alpha (a survivor that took its
address over only now) is lifted by the plane's sweep; one taken while the plane is down is
given up by beta's agent itself (services/file/takeover.py); alpha drained and removed, it
leaves the grace database and beta still serves. Then beta is paused past the down threshold,
fenced by the plane and resumed: its agent restarts Ganesha with a fresh CephFS client (the
fence in the heartbeat's answer) and beta's entry serves again; a late grace task and a late
membership end for beta (tasks run after it came back) leave it fenced once and a member."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from services.file.takeover import LIFT_AFTER
from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from tests.cluster_support import ceph_nodes
from tests.kit import wait_for

pytestmark = pytest.mark.root
pytest.importorskip("nfs_rs")

ADDRESSES = {"alpha": "127.0.0.2", "beta": "127.0.0.3"}
GRACE = 10          # seconds: each server's own grace and lease, short for the test


@pytest.fixture(scope="module")
def cluster(ceph_cluster):
    """The plane with a Ceph pool and a file system on it; alpha and beta serving files."""
    with ceph_nodes(ceph_cluster, ADDRESSES, "file", filesystem="ckpt", grace=GRACE) as c:
        yield c


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


def read_back(address: str, port: int, payload: bytes, timeout: float = 120,
              name: str = "shard-0") -> None:
    def answers():
        with connect(port, "/ckpt", host=address) as client:
            return read_hash(client, name)
    got = wait_for(answers, timeout, f"{name} read back through {address}:{port}",
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
    # the plane started the grace for alpha's clients, then gave up alpha's need at once:
    # grace over with alpha still down and a member, and beta takes new opens again (the
    # cluster waits neither for an operator nor for a grace period)
    wait_for(lambda: cluster.plane_logged("node(s) alpha down: NFS grace started"), 60,
             "the plane's grace for alpha", interval=0.5)
    started = time.monotonic() - killed
    wait_for(lambda: cluster.plane_logged("node alpha down: NFS grace lifted"), 60,
             "the plane lifting alpha's need", interval=0.5)
    wait_for(grace.dump, 60, "grace over with alpha still down", interval=0.5,
             until=lambda s: not s.in_grace and "alpha" in s.members and not s.needs("alpha"))
    print(f"kill -9 to alpha down: {down:.1f} s; to grace started: {started:.1f} s; "
          f"to grace over: {time.monotonic() - killed:.1f} s")
    assert cluster.api("GET", f"nfs-exports/{export['id']}/").json()["recommended"][
        "node"] == "beta"
    read_back(ADDRESSES["beta"], cluster.ports["beta"], payload)

    # a late takeover: a survivor that takes alpha's address over now (keepalived heard
    # alpha after the plane had lost it) starts the grace for alpha again, as
    # services.file.takeover does; no signal follows, and the plane's sweep gives the need up
    grace.start("alpha")
    assert grace.dump().needs("alpha")
    again = time.monotonic()
    wait_for(grace.dump, 60, "the sweep lifting alpha's need again", interval=0.5,
             until=lambda s: not s.in_grace and not s.needs("alpha"))
    print(f"a late takeover's grace lifted by the sweep in {time.monotonic() - again:.1f} s")

    # the plane down when beta takes alpha's address over (keepalived runs this command:
    # tests/test_ceph_cluster_deploy.py): nothing would end that grace until the plane is
    # back, so beta's agent gives alpha's need up itself, LIFT_AFTER s later (the MDS has
    # closed a dead server's CephFS sessions by then), and the cluster takes new opens again
    cluster.stop_plane()
    try:
        took = subprocess.run([sys.executable, "-m", "services.file.takeover",
                               str(cluster.agent_data("beta")), "alpha", "master"],
                              capture_output=True, text=True, timeout=60)
        assert "NFS grace started for its clients" in took.stdout, took.stdout + took.stderr
        taken = time.monotonic()
        assert grace.dump().needs("alpha")
        wait_for(grace.dump, LIFT_AFTER + 60, "beta's agent giving alpha's need up",
                 interval=1, until=lambda s: not s.in_grace and not s.needs("alpha"))
        lifted = time.monotonic() - taken
        assert lifted >= LIFT_AFTER - 1, lifted     # not before the MDS closed the sessions
        assert "NFS grace of alpha given up" in (cluster.dir / "beta.out").read_text()
        write_through_beta = os.urandom(2**20 + 3)
        with connect(cluster.ports["beta"], "/ckpt", host=ADDRESSES["beta"]) as client:
            write_file(client, "while-the-plane-is-down", write_through_beta)   # a new open
        print(f"the plane down: a takeover's grace given up by the survivor in {lifted:.1f} s")
    finally:
        written_down = cluster.plane_log().count("node(s) down (no heartbeat")
        cluster.start_plane()
    read_back(ADDRESSES["beta"], cluster.ports["beta"], write_through_beta,
              name="while-the-plane-is-down")
    # the plane back wrote no node down: beta is up as soon as its agent's next heartbeat is
    # heard (until then its last one is old and the API shows it down), and the plane's log
    # has no node written down since it started again
    cluster.wait_state("beta", "up", timeout=30)
    assert cluster.plane_log().count("node(s) down (no heartbeat") == written_down, \
        cluster.plane_log()[-3000:]

    # alpha taken out of the cluster: its need given up, grace ends, beta serves new clients
    assert cluster.cli("node", "drain", "alpha").returncode == 0
    removed = cluster.cli("node", "remove", "alpha")
    assert removed.returncode == 0, removed.stderr
    wait_for(grace.dump, 90, "grace over without alpha", interval=1,
             until=lambda s: not s.in_grace and "alpha" not in s.members)
    read_back(ADDRESSES["beta"], cluster.ports["beta"], payload)


def test_a_node_fenced_while_paused_serves_again_without_an_agent_restart(cluster, ceph_cluster):
    """beta paused (SIGSTOP: its agent and daemons) past the down threshold: the plane writes
    it down and fences its CephFS clients (evicted, so blocklisted). Resumed, its Ganesha's
    client serves nothing any more: the agent sees the fence in the heartbeat's answer and
    restarts Ganesha with a fresh client, and beta's entry serves again, the agent itself
    never restarted."""
    if not cluster.api("GET", "nfs-exports/").json()["results"]:
        made = cluster.api("POST", "nfs-exports/", json={
            "filesystem": "ckpt", "pseudo": "/ckpt",
            "clients": ["127.0.0.0/8 rw no_root_squash"]})
        assert made.status_code == 201, made.text
    address, port = ADDRESSES["beta"], cluster.ports["beta"]
    payload = os.urandom(2**20 + 5)

    def write():
        with connect(port, "/ckpt", host=address) as client:
            write_file(client, "fenced-0", payload)
        return True
    wait_for(write, 120, "a write through beta's Ganesha", interval=1, ignore=(Exception,))
    agent = cluster.agents["beta"]
    ganesha = cluster.node("beta")["daemons"]["ganesha"]["pid"]
    pids = cluster.signal_node("beta", signal.SIGSTOP)
    paused = time.monotonic()
    try:
        cluster.wait_state("beta", "down", timeout=60)
        wait_for(lambda: cluster.plane_logged("node beta down: its CephFS sessions evicted"),
                 60, "the plane's eviction of beta's CephFS sessions", interval=0.5)
    finally:
        cluster.signal_node("beta", signal.SIGCONT, pids)
    resumed = time.monotonic()
    read_back(address, port, payload, name="fenced-0")
    print(f"beta paused to fenced and resumed: {resumed - paused:.1f} s; resumed to its entry "
          f"serving again: {time.monotonic() - resumed:.1f} s")
    assert cluster.agents["beta"] is agent and agent.poll() is None
    assert cluster.node("beta")["daemons"]["ganesha"]["pid"] != ganesha
    assert "restarting the file service's daemons" in (cluster.dir / "beta.out").read_text()

    # the grace task for beta run again now that beta serves (a retry once Ceph answers, or a
    # plane restarted with it pending: Celery puts it back): beta is not fenced a second time
    from celery import Celery
    serving = cluster.node("beta")["daemons"]["ganesha"]["pid"]
    Celery(broker=cluster.redis_url).send_task("file.start_grace", args=[["beta"]])
    wait_for(lambda: cluster.plane_logged("node(s) beta no longer down: no NFS grace"), 60,
             "the plane running the late grace task", interval=0.5)
    assert not grace_db(cluster, ceph_cluster).dump().needs("beta")
    read_back(address, port, payload, name="fenced-0")
    assert cluster.node("beta")["daemons"]["ganesha"]["pid"] == serving
    assert cluster.plane_log().count("node beta down: its CephFS sessions evicted") == 1

    # a late membership end for beta (a removal's task run after beta joined again under its
    # name): beta stays a member of the grace database and serves
    Celery(broker=cluster.redis_url).send_task("file.end_grace", args=["beta"])
    wait_for(lambda: cluster.plane_logged("node beta is in the cluster again"), 60,
             "the plane running the late membership end", interval=0.5)
    assert "beta" in grace_db(cluster, ceph_cluster).dump().members
    read_back(address, port, payload, name="fenced-0")
