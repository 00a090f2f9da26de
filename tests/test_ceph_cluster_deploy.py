"""The nspawn (Ansible) cluster on a Ceph pool: NFS through the nodes' floating addresses, a
node crashed under a client, grace started by the survivor that took the address over.

Ansible deploys a plane host and three node hosts (systemd-nspawn, systemd as PID 1:
tests/nodes.py) with the Ceph client settings of the session's Ceph cluster (tests/ceph.py,
on 10.78.0.1, reached from the bridge through its host end) in the inventory. A Ceph pool
and a file system on it are made through the plane's API and every node is assigned
``file``: each node's Ganesha serves the export (FSAL_CEPH, ``rados_cluster`` recovery, one
grace database in the pool's RADOS pool). The client is this host, on the bridge (nfs-rs,
NFSv4.1), and talks to the nodes' floating addresses only.

The same pool keeps the buckets (the inventory's ``strata_s3_store=rados``: every node is
assigned ``object`` too and its S3 gateway serves them; an object PUT through node1 reads
back through node2 and node3) and a volume (RBD), exported over iSCSI by the node assigned
``block`` (node2: tgtd with tgt-rbd), written and read back from the bridge with qemu-img's
libiscsi initiator. The nodes hold no admin key of the Ceph cluster (only the plane host
does): what they serve, they serve with the cephx keys of their own the plane made.

Then, for each node in turn: a shard written through its floating address, the node crashed
(every process killed, its link down); the address moves to the next node by name
(keepalived), whose ``notify_master`` puts the NFS cluster in grace for the crashed node at
once (services/file/takeover.py), before the plane writes the node down (15 s without a
heartbeat); a new client's open through the address waits out the grace (nfs-rs retries
NFS4ERR_GRACE, as the Linux client does); the plane gives up the node's need once it wrote the
node down and fenced its CephFS clients; the shard then reads back through the same address and a new file is
written and read there. The times from the crash to each step
are printed (median over the runs), and the node is booted again for the next run.

The first crash has a real client too: a TCG guest (tests/guest.py, the Linux kernel's NFS
client) on the bridge (a tap of the root namespace enslaved to it, ``GUEST_ADDRESS``) mounts
the export through node1's floating address (NFSv4.1, ``nconnect=4``) and writes shards with
fsync, one every ~0.1 s; node1 is crashed once two are fsynced. The guest carries on without
a remount (one mount, no write failed), every shard it fsynced reads back whole by hash
through node3's floating address (node2 took node1's over), and the failover it saw (from
the crash to its first write fsynced after it) is printed: 21.1 s since the plane lifts the
grace at the fence (27.2, 27.5, 28.1 and 41.0 s in four runs before, when it waited one grace
period more), as the grace ends (each shard is a new file, and new opens wait out the grace). The
guest costs the module little: it boots in seconds and its wait overlaps the crash's own (the
module 209-235 s with it in three runs, 213-228 s without in two, load average ~1; the crash
test 111-120 s against 122 s). In one more run the guest's first mount failed after ~106 s
(Remote I/O error, cause not found: the hosts were gone); the guest now retries its mount
(up to 3 tries, printed) after the test waited for node1 holding its address and no grace.

Its own bridge (10.79.0.0/24, tests/nodes.py ``CEPH_SUBNET``): the module runs in the Ceph
group (tests/parallel.py), beside the cluster group's session on 10.77.0.0/24.
"""
from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from plumbing.keepalived import backups_of
from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from tests.ansible_support import (cluster_commands, floating_address, playbook, wheelhouse,
                                   write_inventory)
from tests.guest import Boot
from tests.kit import wait_for
from tests.nodes import CEPH_BRIDGE, CEPH_SUBNET, hosts_on

pytestmark = pytest.mark.root
pytest.importorskip("nfs_rs")

NODES = ["node1", "node2", "node3"]
GRACE = 10              # seconds: each Ganesha's grace period and lease, short for the test
NFS_PORT = 2049
RUNS = int(os.environ.get("STRATA_CEPH_CLUSTER_CRASHES", "3"))    # one crash per node
DATA = "/var/lib/strata"
POOL = f"nodes-{uuid.uuid4().hex[:6]}"   # the Ceph pool: file system, buckets, volume
S3_PORT = 9000
BLOCK_NODE = "node2"                     # the node assigned `block`
VOLUME = "disk"
ADMIN_KEYRING = "/etc/ceph/ceph.client.admin.keyring"
# the TCG guest of the first crash, on the bridge outside the hosts' (.1 the bridge's host
# end, .10 up: plane1 and the nodes) and the floating (.110 up) addresses; it writes a shard
# of SHARD bytes every ~0.1 s, at most 300 (some 30 s before the crash must come)
GUEST_ADDRESS = f"{CEPH_SUBNET}.50"
GUEST_TAP = "strata-tap79"
GUEST_SOURCES = 4       # the guest writes shard i as a copy of source i % 4
SHARD = 2**20 + 5

GUEST_SCRIPT = """load nfs
hostname guest
ip link set eth0 up
ip addr add {guest}/24 dev eth0
mkdir -p /mnt/ckpt
tries=0
until mount -t nfs4 -o vers=4.1,nconnect=4,lookupcache=none,port={port},addr={host},\
clientaddr={guest} {host}:/ckpt /mnt/ckpt; do
  tries=$((tries + 1)); echo MOUNT-FAILED $tries $(cut -d' ' -f1 /proc/uptime)
  [ $tries -lt 3 ] || exit 1
done
echo MOUNTED $(grep /mnt/ckpt /proc/mounts)
dir=/mnt/ckpt/{rel}
mkdir -p $dir
i=0
while [ ! -e $dir/STOP ] && [ $i -lt 300 ]; do
  if dd if=/shards/src$((i % {sources})) of=$dir/shard$i bs=256k conv=fsync 2>/tmp/err; then
    echo FSYNCED shard$i $(cut -d' ' -f1 /proc/uptime)
  else
    echo FAILED shard$i $(cat /tmp/err)
  fi
  i=$((i + 1))
  sleep 0.1
done
echo DONE
"""


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
    settings = {**ceph_settings(ceph_cluster), "strata_s3_store": "rados",
                "strata_s3_pool": POOL}
    inventory = write_inventory(hosts, ["plane1"], NODES, wheelhouse(), settings)
    run = playbook(inventory)
    print(f"deploy plane + 3 nodes with Ceph client settings: {run.seconds:.0f} s")
    unit = hosts.ssh("plane1", "systemctl cat strata-plane").stdout
    assert f"--s3-store rados --s3-pool {POOL}\n" in unit, unit
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
    """A Ceph pool, file system ckpt and a volume on it, every node serving the export /ckpt
    and S3 (the buckets in the pool), BLOCK_NODE the block service."""
    hosts, plane = deployed
    pool = POOL
    try:
        made = plane("POST", "pools/", json={
            "name": pool, "driver": "ceph", "ceph_conf": "/etc/ceph/ceph.conf",
            "ceph_client": "admin", "redundancy": "replicated:3", "failure_domain": "host"})
        assert made.status_code == 201, made.text
        made = plane("POST", "filesystems/", json={"name": "ckpt", "pool": pool})
        assert made.status_code == 201, made.text
        made = plane("POST", "volumes/", json={"name": VOLUME, "pool": pool,
                                              "size_bytes": 16 * 2**20})
        assert made.status_code == 201, made.text
        for name in NODES:
            services = ["file", "object"] + (["block"] if name == BLOCK_NODE else [])
            done = plane("PATCH", f"nodes/{name}/", json={"services": services, "options": {
                "nfs_grace_seconds": GRACE, "nfs_lease_seconds": GRACE, "s3_port": S3_PORT,
                "s3_workers": 1, "spdk": "off"}})
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
            for export in plane("GET", "block-exports/").json().get("results", []):
                plane("DELETE", f"block-exports/{export['id']}/")
            # once the node let go of the image (it drops the export at its next heartbeat)
            wait_for(lambda: plane("DELETE", f"volumes/{VOLUME}/").status_code, 60,
                     "the volume deleted", interval=1, until=lambda code: code in (204, 404))
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


def listening(hosts, name: str) -> set[str]:
    """The TCP addresses ``name`` listens on (``ss``: ``10.79.0.12:3260``, ``0.0.0.0:9000``)."""
    out = hosts.ssh(name, "ss -Hltn").stdout
    return {line.split()[3] for line in out.splitlines() if len(line.split()) > 3}


def s3_client(address: str, port: int, key: dict):
    return boto3.client(
        "s3", endpoint_url=f"http://{address}:{port}", aws_access_key_id=key["access_key"],
        aws_secret_access_key=key["secret_key"], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                      retries={"max_attempts": 1}, connect_timeout=3, read_timeout=30))


def iscsi_opts(connection: dict) -> str:
    """qemu's libiscsi initiator on the export (``allow_any``: no CHAP)."""
    return (f"driver=iscsi,transport=tcp,portal={connection['portal']},"
            f"target={connection['target_iqn']},lun={connection['lun']},"
            "initiator-name=iqn.2026-01.io.strata:test-bridge")


def diagnose(hosts, plane, name: str) -> None:
    """What the plane and node ``name``'s agent say, printed when a wait on it failed."""
    print(f"{name} as the plane has it: {json.dumps(plane.nodes().get(name), indent=1)}")
    print(hosts.ssh(name, f"journalctl -u strata-node --no-pager | tail -30; cd {DATA}/log; "
                          "for f in s3.log tgtd.log reconcile-*.log; do echo \"== $f\"; "
                          "tail -20 $f; done", check=False).stdout)


def test_a_bucket_and_a_volume_on_the_ceph_pool_served_by_the_nodes_without_the_admin_key(
        served, tmp_path):
    hosts, plane, _, _ = served
    start = time.monotonic()
    # the inventory's admin key went to the plane host alone; the nodes serve NFS (the test
    # above), S3 and iSCSI with the keys of their own the plane made for them
    assert hosts.ssh("plane1", f"test -s {ADMIN_KEYRING}", check=False).returncode == 0
    for name in NODES:
        assert hosts.ssh(name, f"test -e {ADMIN_KEYRING}", check=False).returncode == 1, name
        assert hosts.ssh(name, "test -s /etc/ceph/ceph.conf", check=False).returncode == 0

    # S3: a key made on the plane reaches every node's gateway (RADOS store in the pool)
    made = plane("POST", "s3-keys/", json={"user": "tester", "admin": True})
    assert made.status_code == 201, made.text
    nodes = plane.nodes()
    clients = {n: s3_client(nodes[n]["data_address"], nodes[n]["options"]["s3_port"],
                            made.json()) for n in NODES}
    for name in NODES:
        try:
            wait_for(lambda n=name: clients[n].list_buckets() is not None, 180,
                     f"{name}'s gateway serving the new key", interval=1,
                     ignore=(ClientError, BotoCoreError))
        except AssertionError:
            diagnose(hosts, plane, name)
            raise
        # on every address (the cluster has floating addresses), the node's own RADOS client
        assert f"0.0.0.0:{S3_PORT}" in listening(hosts, name)
        store = json.loads(hosts.ssh(name, f"cat {DATA}/run/s3/gateway.json").stdout)["store"]
        assert (store["kind"], store["client"]) == ("rados", f"strata-node.{name}.{POOL}")
    # the bucket made through the plane's API (which calls a node's gateway: `strata plane`
    # runs none), then written through node1 and read through the others
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    made = plane("POST", "buckets/", json={"name": bucket, "owner": "tester"})
    assert made.status_code == 201, made.text
    assert bucket in {b["name"] for b in plane("GET", "buckets/").json()["results"]}
    body = os.urandom(5 * 2**20 + 3)        # data objects in RADOS, not inline in the index
    clients["node1"].put_object(Bucket=bucket, Key="shard-0", Body=body)
    for name in ("node2", "node3"):
        got = clients[name].get_object(Bucket=bucket, Key="shard-0")["Body"].read()
        assert sha(got) == sha(body), name
    s3_seconds = time.monotonic() - start

    # iSCSI: the volume exported by the node assigned `block`, on its data address
    entry = next(e for e in plane("GET", "nodes/placement/").json()["volumes"]
                 if e["name"] == VOLUME)
    assert entry["nodes"] == [BLOCK_NODE], entry
    made = plane("POST", "block-exports/", json={"volume": VOLUME, "protocol": "iscsi",
                                                 "allow_any": True})
    assert made.status_code == 201, made.text
    export_id = made.json()["id"]
    try:
        try:
            row = wait_for(lambda: plane("GET", f"block-exports/{export_id}/").json(), 90,
                           f"{BLOCK_NODE}'s iSCSI export online", interval=1,
                           until=lambda r: r["state"] == "online")
        except AssertionError:
            diagnose(hosts, plane, BLOCK_NODE)
            raise
        address = nodes[BLOCK_NODE]["data_address"]
        assert row["connection"]["portal"] == f"{address}:3260", row["connection"]
        assert f"{address}:3260" in listening(hosts, BLOCK_NODE)
        assert not any(a.endswith(":3260") for n in NODES if n != BLOCK_NODE
                       for a in listening(hosts, n))
        src, out = tmp_path / "src.bin", tmp_path / "out.bin"
        src.write_bytes(os.urandom(16 * 2**20))
        opts = iscsi_opts(row["connection"])
        for argv in (["qemu-img", "convert", "-n", "-f", "raw", str(src),
                      "--target-image-opts", opts],
                     ["qemu-img", "convert", "-O", "raw", "--image-opts", opts, str(out)]):
            cp = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert cp.returncode == 0, cp.stderr
        assert sha(out.read_bytes()) == sha(src.read_bytes())
    finally:      # the crashes that follow find node2 holding no image open
        plane("DELETE", f"block-exports/{export_id}/")
    print(f"S3 through the nodes: {s3_seconds:.1f} s; the volume over iSCSI: "
          f"{time.monotonic() - start - s3_seconds:.1f} s")


def _tcp_answers(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=0.3).close()
        return True
    except OSError:
        return False


class BridgeGuest:
    """A TCG guest on the bridge (a tap of the root namespace enslaved to it, GUEST_ADDRESS)
    that mounts the export through ``address`` with its kernel client (NFSv4.1,
    ``nconnect=4``) and writes shards with fsync into ``rel`` until ``rel/STOP`` exists."""

    def __init__(self, image, tmp_path, address: str, bridge: str):
        self.rel = f"guest-{uuid.uuid4().hex[:6]}"
        self.sources = [os.urandom(SHARD + k) for k in range(GUEST_SOURCES)]
        subprocess.run(["ip", "tuntap", "add", "dev", GUEST_TAP, "mode", "tap"], check=True)
        try:
            subprocess.run(["ip", "link", "set", GUEST_TAP, "master", bridge, "up"], check=True)
            script = GUEST_SCRIPT.format(guest=GUEST_ADDRESS, host=address, port=NFS_PORT,
                                         rel=self.rel, sources=GUEST_SOURCES)
            initrd = image.initrd_with(script, {f"/shards/src{k}": d for k, d in
                                                enumerate(self.sources)}, tag="bridge-guest")
            argv = image.boot_args(initrd, append="no_timer_check") + [
                "-netdev", f"tap,id=n0,ifname={GUEST_TAP},script=no,downscript=no",
                "-device", "virtio-net-pci,netdev=n0,romfile=,mac=52:54:00:79:00:50"]
            self.vm = Boot(argv, tmp_path / "guest.log", timeout=900)
        except BaseException:
            self.close()
            raise

    def payload(self, shard: str) -> bytes:
        return self.sources[int(shard[len("shard"):]) % GUEST_SOURCES]

    def fsynced(self) -> list[str]:
        """The shards the guest printed as fsynced; AssertionError once it stopped before
        the end of its loop."""
        out = self.vm.output()
        if self.vm.proc.poll() is not None and "\nDONE" not in out:
            raise AssertionError(f"guest exited:\n{out[-3000:]}")
        return re.findall(r"^FSYNCED (\S+)", out, re.M)

    def close(self) -> None:
        if getattr(self, "vm", None):
            self.vm.kill()
        subprocess.run(["ip", "link", "del", GUEST_TAP], capture_output=True)


def crash_and_follow(hosts, plane, grace, victim: str, guest: BridgeGuest | None = None
                     ) -> dict:
    """Crash ``victim`` under a client of its floating address (and ``guest``'s kernel
    client, writing through it); seconds from the crash to each step."""
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
    before = guest.fsynced() if guest else []
    with ThreadPoolExecutor(5) as pool:
        if guest:
            carried = pool.submit(since, lambda: len(guest.fsynced()) > len(before), 300,
                                  "the guest's first write fsynced after the crash", 0.05)
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
        if guest:
            times["guest"] = carried.result()
            times["guest before"] = len(before)
    assert f"{address}/" in hosts.ssh(taker, "ip -o -4 addr").stdout      # next by name
    grace_over = since(lambda: not grace.dump().in_grace, 120, "grace over", 0.5)
    times["grace over"] = grace_over
    # a new open through the same address after grace
    after = os.urandom(2**20 + 13)
    write(address, f"{shard}-after", after)
    assert read(address, f"{shard}-after") == (len(after), sha(after))
    log = hosts.ssh(taker, f"cat {DATA}/log/takeover.log").stdout
    assert f"took {victim}'s address over; NFS grace started for its clients" in log, log
    print(f"crash of {victim}: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()
                                             if k != "guest before"))
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


def guest_carried_on(hosts, guest: BridgeGuest, victim: str, times: dict) -> None:
    """After the crash of ``victim`` under ``guest``: the guest stopped (STOP written through
    another node's floating address), its mount never redone, no write failed, and every
    shard it fsynced read back whole by hash through that other node's address."""
    other = floating(hosts, next(n for n in NODES
                                 if n not in (victim, backups_of(victim, NODES)[0])))
    write(other, f"{guest.rel}/STOP", b"")
    out = guest.vm.wait()
    mounted = guest.vm.marker("MOUNTED")
    assert out.count("MOUNTED ") == 1 and " nfs4 " in mounted, mounted
    assert "vers=4.1" in mounted and "nconnect=4" in mounted, mounted
    assert "FAILED" not in out, out[-3000:]
    written = guest.fsynced()
    assert len(written) > times["guest before"] >= 2, (times, written)
    with connect(NFS_PORT, "/ckpt", host=other) as client:
        for shard in written:
            payload = guest.payload(shard)
            assert read_hash(client, f"{guest.rel}/{shard}") == (len(payload), sha(payload))
    if "MOUNT-FAILED" in out:      # seen once in four runs (after ~106 s: Remote I/O error)
        print("the guest's mount failed before it went through: " +
              "; ".join(re.findall(r"^MOUNT-FAILED (.*?)\r?$", out, re.M)))
    print(f"crash of {victim} under the guest (kernel client, NFSv4.1, nconnect=4, through "
          f"{floating(hosts, victim)}): its first write fsynced after the crash "
          f"{times['guest']:.1f} s after it; {times['guest before']} shards fsynced before, "
          f"{len(written)} in all, read back through {other}")


def test_crashed_node_the_address_moves_grace_at_once_reads_back_through_it(
        served, own_guest_image, tmp_path):
    hosts, plane, _, grace = served
    runs = []
    victims = NODES[:max(1, RUNS)]
    # the first crash is under a TCG guest too, writing through the victim's address (once
    # the victim holds it and the cluster is out of grace)
    address = floating(hosts, victims[0])
    wait_for(lambda: address in hosts.ssh(victims[0], "ip -o -4 addr").stdout, 60,
             f"{victims[0]} holding its address", interval=1)
    wait_for(grace.dump, 120, "the cluster out of grace", interval=1,
             until=lambda s: not s.in_grace)
    guest = BridgeGuest(own_guest_image, tmp_path, address, hosts.bridge_name)
    for i, victim in enumerate(victims):
        try:
            if i:
                restore(hosts, plane, grace, victims[i - 1])
            if i == 0:
                wait_for(guest.fsynced, 600, "two shards fsynced by the guest",
                         interval=0.2, until=lambda done: len(done) >= 2)
                times = crash_and_follow(hosts, plane, grace, victim, guest)
                try:
                    guest_carried_on(hosts, guest, victim, times)
                finally:
                    guest.close()
                del times["guest"], times["guest before"]
                runs.append(times)
            else:
                runs.append(crash_and_follow(hosts, plane, grace, victim))
        except Exception:
            guest.close()
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
