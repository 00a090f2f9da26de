"""The nspawn (Ansible) cluster on a Ceph pool: NFS through the nodes' floating addresses, a
node crashed under a client, grace started by the survivor that took the address over.

Ansible deploys a plane host and three node hosts (systemd-nspawn, systemd as PID 1:
tests/nodes.py) with the Ceph client settings of the session's Ceph cluster (tests/ceph.py,
on 10.78.0.1, reached from the bridge through its host end) in the inventory. A Ceph pool
and a file system on it are made through the plane's API and every node is assigned
``file``: each node's Ganesha serves the export (FSAL_CEPH, ``rados_cluster`` recovery, one
grace database in the pool's RADOS pool). The client is this host, on the bridge (nfs-rs,
NFSv4.1), and talks to the nodes' floating addresses only.

Then, for each node in turn: a shard written through its floating address, the node crashed
(every process killed, its link down); the address moves to the next node by name
(keepalived), whose ``notify_master`` puts the NFS cluster in grace for the crashed node at
once (services/file/takeover.py), before the plane writes the node down (15 s without a
heartbeat); a new client's open through the address waits out the grace (nfs-rs retries
NFS4ERR_GRACE, as the Linux client does); the plane gives up the node's need one grace period
after writing it down; the shard then reads back through the same address and a new file is
written and read there. The times from the crash to each step
are printed (median over the runs), and the node is booted again for the next run.

Its own bridge (10.79.0.0/24, tests/nodes.py ``CEPH_SUBNET``): the module runs in the Ceph
group (tests/parallel.py), beside the cluster group's session on 10.77.0.0/24.
"""
from __future__ import annotations

import json
import os
import re
import socket
import statistics
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from plumbing.keepalived import backups_of
from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from tests.ansible_support import (cluster_commands, floating_address, playbook, wheelhouse,
                                   write_inventory)
from tests.kit import wait_for
from tests.nodes import CEPH_BRIDGE, CEPH_SUBNET, hosts_on

pytestmark = pytest.mark.root
pytest.importorskip("nfs_rs")

NODES = ["node1", "node2", "node3"]
GRACE = 10              # seconds: each Ganesha's grace period and lease, short for the test
NFS_PORT = 2049
RUNS = int(os.environ.get("STRATA_CEPH_CLUSTER_CRASHES", "3"))    # one crash per node
DATA = "/var/lib/strata"


def ceph_settings(cluster) -> dict:
    """The inventory's Ceph client settings for the session's cluster (its admin key: the
    plane makes each node's own keys with it)."""
    conf = cluster.conf.read_text()
    key = re.search(r"^\s*key\s*=\s*(\S+)", cluster.keyring.read_text(), re.M).group(1)
    return {"ceph_fsid": re.search(r"^fsid = (\S+)", conf, re.M).group(1),
            "ceph_mon_host": re.search(r"^mon_host = (\S+)", conf, re.M).group(1),
            "ceph_client_name": "client.admin", "ceph_client_key": key}


class Plane:
    """The plane's REST API from the controller, as its admin (credentials.json on plane1)."""

    def __init__(self, hosts):
        creds = json.loads(hosts.ssh("plane1", f"cat {DATA}/credentials.json").stdout)
        self.url, self.token = creds["api_url"].rstrip("/") + "/", creds["token"]

    def __call__(self, method: str, path: str, **kw) -> requests.Response:
        return requests.request(method, self.url + path, timeout=30,
                                headers={"Authorization": f"Token {self.token}"}, **kw)

    def nodes(self) -> dict:
        return {n["name"]: n for n in self("GET", "nodes/").json()["results"]}


@pytest.fixture(scope="module")
def hosts():
    with hosts_on(CEPH_SUBNET, CEPH_BRIDGE) as made:
        yield made


@pytest.fixture(scope="module")
def deployed(ceph_cluster, hosts):
    """plane1 + node1..3 deployed by site.yml with the Ceph client settings; nodes up."""
    if not cluster_commands():
        pytest.skip("the CLI has no `strata plane`/`strata node`")
    for name in ["plane1", *NODES]:
        hosts.add(name)
    inventory = write_inventory(hosts, ["plane1"], NODES, wheelhouse(),
                                ceph_settings(ceph_cluster))
    run = playbook(inventory)
    print(f"deploy plane + 3 nodes with Ceph client settings: {run.seconds:.0f} s")
    plane = wait_for(lambda: Plane(hosts), 60, "the plane's credentials", interval=1,
                     ignore=(RuntimeError, ValueError))
    wait_for(lambda: {n: plane.nodes()[n]["state"] for n in NODES}, 60, "three nodes up",
             interval=1, ignore=(requests.RequestException, KeyError, ValueError),
             until=lambda s: s == {n: "up" for n in NODES})
    return hosts, plane


def grace_db(hosts, ceph_cluster):
    """The grace database node1's Ganesha was configured with, read with the admin key."""
    from services.file.runtime import NfsCluster
    from services.file.runtime.grace import GraceDb

    conf = hosts.ssh("node1", f"cat {DATA}/run/nfs/ganesha.conf").stdout
    assert "RecoveryBackend = rados_cluster;" in conf
    kv = conf[conf.index("RADOS_KV"):]
    pool = re.search(r'\bpool = "?([^";]+)"?;', kv).group(1)
    namespace = re.search(r'\bnamespace = "?([^";]+)"?;', kv).group(1)
    return GraceDb(NfsCluster(conf=str(ceph_cluster.conf), client=ceph_cluster.client,
                              pool=pool, namespace=namespace, nodeid="test"))


@pytest.fixture(scope="module")
def served(deployed, ceph_cluster):
    """A Ceph pool, file system ckpt on it, every node serving its export /ckpt."""
    hosts, plane = deployed
    pool = f"nodes-{uuid.uuid4().hex[:6]}"
    try:
        made = plane("POST", "pools/", json={
            "name": pool, "driver": "ceph", "ceph_conf": "/etc/ceph/ceph.conf",
            "ceph_client": "admin", "redundancy": "replicated:3", "failure_domain": "host"})
        assert made.status_code == 201, made.text
        made = plane("POST", "filesystems/", json={"name": "ckpt", "pool": pool})
        assert made.status_code == 201, made.text
        for name in NODES:
            done = plane("PATCH", f"nodes/{name}/", json={"services": ["file"], "options": {
                "nfs_grace_seconds": GRACE, "nfs_lease_seconds": GRACE}})
            assert done.status_code == 200, done.text
        for name in NODES:
            wait_for(lambda n=name: plane.nodes()[n]["daemons"], 180,
                     f"{name}'s ganesha running", interval=1,
                     until=lambda d: (d.get("ganesha") or {}).get("state") == "running")
        made = plane("POST", "nfs-exports/", json={
            "filesystem": "ckpt", "pseudo": "/ckpt",
            "clients": [f"{hosts.subnet}.0/24 rw no_root_squash"]})
        assert made.status_code == 201, made.text
        grace = grace_db(hosts, ceph_cluster)
        wait_for(grace.dump, 120, "every node a member, first grace over", interval=1,
                 until=lambda s: set(s.members) == set(NODES) and not s.in_grace)
        yield hosts, plane, made.json(), grace
    finally:
        try:
            for export in plane("GET", "nfs-exports/").json().get("results", []):
                plane("DELETE", f"nfs-exports/{export['id']}/")
            plane("DELETE", "filesystems/ckpt/")
            plane("DELETE", f"pools/{pool}/")
        except Exception as exc:      # the plane may be gone: its hosts are torn down anyway
            print(f"clean-up through the API: {exc}")


def floating(hosts, name: str) -> str:
    return floating_address(hosts.hosts[name])


def write(address: str, path: str, payload: bytes) -> None:
    with connect(NFS_PORT, "/ckpt", host=address) as client:
        write_file(client, path, payload)


def read(address: str, path: str) -> tuple[int, str]:
    with connect(NFS_PORT, "/ckpt", host=address) as client:
        return read_hash(client, path)


def test_every_node_serves_the_export_through_its_floating_address(served):
    hosts, plane, export, _ = served
    assert {e["node"] for e in export["entries"]} == set(NODES), export["entries"]
    for name in NODES:
        # each address held by its owner (keepalived MASTER on each)
        wait_for(lambda n=name: floating(hosts, n) in hosts.ssh(n, "ip -o -4 addr").stdout,
                 60, f"{name} holding its floating address", interval=1)
    for i, name in enumerate(NODES):
        payload = os.urandom(2**20 + i)
        wait_for(lambda n=name, p=payload: write(floating(hosts, n), f"first-{n}", p) or True,
                 60, f"a write through {name}'s floating address", interval=1,
                 ignore=(Exception,))
        other = NODES[(i + 1) % len(NODES)]      # each node follows the export within beats
        got = wait_for(lambda n=name, o=other: read(floating(hosts, o), f"first-{n}"), 60,
                       f"first-{name} read through {other}'s floating address", interval=1,
                       ignore=(Exception,))
        assert got == (len(payload), sha(payload))


def _tcp_answers(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=0.3).close()
        return True
    except OSError:
        return False


def crash_and_follow(hosts, plane, grace, victim: str) -> dict:
    """Crash ``victim`` under a client of its floating address; seconds from the crash to
    each step."""
    address = floating(hosts, victim)
    taker = backups_of(victim, NODES)[0]
    payload = os.urandom(2**20 + 11)
    shard = f"shard-{victim}-{uuid.uuid4().hex[:4]}"
    wait_for(lambda: write(address, shard, payload) or True, 60,
             f"a write through {victim}'s floating address", interval=1, ignore=(Exception,))
    def since(check, timeout: float, what: str, interval: float = 0.1) -> float:
        wait_for(check, timeout, what, interval=interval)
        seconds = time.monotonic() - start
        print(f"  {what}: {seconds:.1f} s after the crash", flush=True)
        return seconds

    def first_read() -> bool:
        try:
            return read(address, shard) == (len(payload), sha(payload))
        except Exception:      # no answer yet: try again
            return False

    start = time.monotonic()
    hosts.crash(victim)
    with ThreadPoolExecutor(4) as pool:
        moved = pool.submit(since, lambda: _tcp_answers(address, NFS_PORT), 30,
                            f"{victim}'s floating address answering NFS again")
        in_grace = pool.submit(since, lambda: (lambda s: s.in_grace and s.needs(victim))(
            grace.dump()), 60, f"the cluster in grace for {victim}", 0.2)
        down = pool.submit(since, lambda: plane.nodes()[victim]["state"] == "down", 60,
                           f"{victim} written down", 0.5)
        readable = pool.submit(since, first_read, 120,
                               f"the shard read back through {address}", 0.5)
        times = {"moved": moved.result(), "in grace": in_grace.result(),
                 "down": down.result(), "read": readable.result()}
    assert f"{address}/" in hosts.ssh(taker, "ip -o -4 addr").stdout      # next by name
    grace_over = since(lambda: not grace.dump().in_grace, 120, "grace over", 0.5)
    times["grace over"] = grace_over
    # a new open through the same address after grace
    after = os.urandom(2**20 + 13)
    write(address, f"{shard}-after", after)
    assert read(address, f"{shard}-after") == (len(after), sha(after))
    log = hosts.ssh(taker, f"cat {DATA}/log/takeover.log").stdout
    assert f"took {victim}'s address over; NFS grace started for its clients" in log, log
    print(f"crash of {victim}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    # the survivor started grace itself, before the plane wrote the node down
    assert times["in grace"] < times["down"], times
    assert times["in grace"] - times["moved"] < 5, times
    return times


def restore(hosts, plane, grace, victim: str) -> None:
    """Boot ``victim`` again; back when it is up, serving, holding its address, grace over."""
    hosts.boot(hosts.hosts[victim])
    wait_for(lambda: plane.nodes()[victim], 120, f"{victim} up and serving", interval=1,
             until=lambda n: n["state"] == "up" and
             ((n.get("daemons") or {}).get("ganesha") or {}).get("state") == "running")
    wait_for(lambda: floating(hosts, victim) in hosts.ssh(victim, "ip -o -4 addr").stdout,
             60, f"{victim} holding its address again", interval=1)
    wait_for(grace.dump, 120, "grace over after the restart", interval=1,
             until=lambda s: not s.in_grace)


def test_crashed_node_the_address_moves_grace_at_once_reads_back_through_it(served):
    hosts, plane, _, grace = served
    runs = []
    victims = NODES[:max(1, RUNS)]
    for i, victim in enumerate(victims):
        try:
            if i:
                restore(hosts, plane, grace, victims[i - 1])
            runs.append(crash_and_follow(hosts, plane, grace, victim))
        except Exception:
            taker = backups_of(victim, NODES)[0]
            print(f"grace database: {grace.dump()}")
            print(hosts.ssh(taker, f"cd {DATA}; cat log/takeover.log; ls -la run/vrrp; grep "
                                   "-B2 -A2 notify run/vrrp/keepalived.conf; tail -40 "
                                   "log/keepalived.log", check=False).stdout)
            print(hosts.ssh("plane1", f"grep -Ei 'grace|error' {DATA}/log/worker.log | "
                                      "tail -40", check=False).stdout)
            raise
    median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"median of {len(runs)} crash(es), seconds from the crash: " +
          ", ".join(f"{k} {v:.1f}" for k, v in median.items()))
