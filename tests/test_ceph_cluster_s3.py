"""S3 on every node (RADOS store), real processes only: a plane started with `--s3-store rados
--s3-pool POOL` (POOL a Ceph pool of the session's cluster) and two node agents (127.0.0.2 and
127.0.0.3, as tests/test_ceph_cluster.py) assigned the object service; each node's gateway
gets its config from the plane (its own cephx key of the pool) and keeps the buckets in the
pool's RADOS pool (Ceph group of tests/parallel.py; its own Redis database,
``STRATA_CLUSTER_CEPH_TEST_REDIS_DB``).

An object PUT through alpha reads back through beta at once; eight clients racing
``If-None-Match: *`` over both nodes: one wins; alpha killed -9 (agent and every daemon)
during a PUT loop against it: the client moves to beta and every acknowledged object reads
back through beta (the time from the kill to the first PUT acknowledged by beta is printed)."""
import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tests.ceph import ceph_pool_body
from tests.cluster_support import Cluster
from tests.kit import free_port, wait_for

pytestmark = pytest.mark.root

REDIS_DB = os.environ.get("STRATA_CLUSTER_CEPH_TEST_REDIS_DB", "4")
ADDRESSES = {"alpha": "127.0.0.2", "beta": "127.0.0.3"}


@pytest.fixture(scope="module")
def cluster(ceph_cluster):
    """The plane with the RADOS store on a Ceph pool; alpha and beta serving S3; an S3 key."""
    c = Cluster(redis_db=REDIS_DB).create()
    pool = f"s3n-{uuid.uuid4().hex[:6]}"
    c.pool, c.ports = pool, {}
    try:
        c.start_plane(args=("--s3-store", "rados", "--s3-pool", pool))
        made = c.api("POST", "pools/", json=ceph_pool_body(ceph_cluster, pool))
        assert made.status_code == 201, made.text
        for name, address in ADDRESSES.items():
            assert c.join(name, address).returncode == 0
            c.run_agent(name)
        for name in ADDRESSES:
            c.wait_state(name, "up", timeout=60)
            c.ports[name] = free_port()
            done = c.api("PATCH", f"nodes/{name}/", json={"services": ["object"], "options": {
                "s3_port": c.ports[name], "s3_workers": 1}})
            assert done.status_code == 200, done.text
        key = c.api("POST", "s3-keys/", json={"user": "tester", "admin": True})
        assert key.status_code == 201, key.text
        c.key = key.json()
        yield c
    finally:
        c.destroy()


def client(cluster, name: str):
    return boto3.client(
        "s3", endpoint_url=f"http://{ADDRESSES[name]}:{cluster.ports[name]}",
        aws_access_key_id=cluster.key["access_key"],
        aws_secret_access_key=cluster.key["secret_key"], region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                      retries={"max_attempts": 1}, connect_timeout=2, read_timeout=20,
                      max_pool_connections=16))


def serving(cluster, name: str):
    """Node ``name``'s gateway answers with the key made after it started (the key reached
    it: the plane's revision moved and the agent fetched the config again)."""
    s3 = client(cluster, name)
    wait_for(lambda: s3.list_buckets() is not None, 180, f"{name}'s gateway serving the key",
             interval=1, ignore=(ClientError, BotoCoreError))
    return s3


def test_every_node_serves_the_same_buckets_and_a_dead_node_loses_no_acknowledged_put(
        cluster, ceph_cluster):
    a, b = serving(cluster, "alpha"), serving(cluster, "beta")
    path = cluster.agent_data("alpha") / "run" / "s3" / "gateway.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    store = json.loads(path.read_text())["store"]     # the node's own cephx client
    assert (store["kind"], store["client"]) == ("rados", f"strata-node.alpha.{cluster.pool}")
    assert store["keyring"].startswith(str(cluster.agent_data("alpha") / "ceph"))
    # the plane renders the same RADOS pool with the pool's own client (`strata up` would
    # run its gateway on it; `strata plane` runs none)
    plane = json.loads((cluster.dir / "plane" / "run" / "s3" / "gateway.json").read_text())
    assert (plane["store"]["pool"], plane["store"]["client"]) == (store["pool"],
                                                                 ceph_cluster.client)
    node_config = json.loads(path.read_text())
    assert plane["users"] == node_config["users"]
    # SSE is refused on RADOS buckets: no node holds the master key or KMS key material
    assert not node_config.get("sse_master_key") and not node_config.get("kms_keys")
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    a.create_bucket(Bucket=bucket)
    body = os.urandom(300_000)
    a.put_object(Bucket=bucket, Key="shard-0", Body=body)
    assert b.get_object(Bucket=bucket, Key="shard-0")["Body"].read() == body

    # If-None-Match: * racing on both nodes: one winner
    clients = [client(cluster, name) for name in ("alpha", "beta") * 4]

    def race(i):
        try:
            clients[i].put_object(Bucket=bucket, Key="once", Body=b"writer %d" % i,
                                  IfNoneMatch="*")
            return 200, i
        except ClientError as exc:
            return exc.response["ResponseMetadata"]["HTTPStatusCode"], i
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(race, range(8)))
    winners = [i for status, i in results if status == 200]
    assert len(winners) == 1 and sorted(s for s, _ in results) == [200] + [412] * 7, results
    assert a.get_object(Bucket=bucket, Key="once")["Body"].read() == b"writer %d" % winners[0]

    # alpha killed -9 during a PUT loop against it: the client moves to beta
    acked: dict[str, bytes] = {}
    state = {"target": "alpha", "killed": None, "first_on_beta": None, "errors": 0}
    stop = threading.Event()

    def writer():
        s3, i = a, 0
        while not stop.is_set():
            key, data = f"loop/{i:05d}", os.urandom(4096 + i % 70_000)
            try:
                s3.put_object(Bucket=bucket, Key=key, Body=data)
            except (ClientError, BotoCoreError):
                state["errors"] += 1
                if state["target"] == "alpha" and state["killed"] is not None:
                    state["target"], s3 = "beta", b     # the client moves on
                time.sleep(0.05)
                continue
            acked[key] = data
            if state["target"] == "beta" and state["first_on_beta"] is None:
                state["first_on_beta"] = time.monotonic()
            i += 1
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(lambda: len(acked), 60, "PUTs acknowledged by alpha", interval=0.1,
                 until=lambda n: n >= 20)
        state["killed"] = time.monotonic()
        cluster.kill_node("alpha")
        wait_for(lambda: state["first_on_beta"], 60, "a PUT acknowledged by beta",
                 interval=0.1)
        wait_for(lambda: len(acked), 60, "more PUTs on beta", interval=0.1,
                 until=lambda n: n >= 60)
    finally:
        stop.set()
        thread.join(60)
    print(f"kill -9 of alpha to the first PUT acknowledged by beta: "
          f"{state['first_on_beta'] - state['killed']:.2f} s ({len(acked)} PUTs acknowledged, "
          f"{state['errors']} failed)")
    for key, data in acked.items():
        assert b.get_object(Bucket=bucket, Key=key)["Body"].read() == data, key
    listed = b.list_objects_v2(Bucket=bucket, Prefix="loop/", MaxKeys=1000)
    assert {o["Key"] for o in listed["Contents"]} >= set(acked)
    # nothing of the buckets on the node's disk: its data root holds run files only
    assert not (cluster.agent_data("beta") / "run" / "s3" / "rados" / "buckets").exists()
