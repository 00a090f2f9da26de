"""S3 on every node (RADOS store), real processes only: a plane started with `--s3-store rados
--s3-pool POOL` (POOL a Ceph pool of the session's cluster) and two node agents (127.0.0.2 and
127.0.0.3, as tests/test_ceph_cluster.py) assigned the object service; each node's gateway
gets its config from the plane (its own cephx key of the pool) and keeps the buckets in the
pool's RADOS pool (Ceph group of tests/parallel.py; its own Redis database,
``STRATA_CLUSTER_CEPH_TEST_REDIS_DB``).

An object PUT through alpha reads back through beta at once; eight clients racing
``If-None-Match: *`` over both nodes: one wins; alpha killed -9 (agent and every daemon)
during a PUT loop against it: the client moves to beta and every acknowledged object reads
back through beta (the time from the kill to the first PUT acknowledged by beta is printed);
right after the kill a CreateBucket and a PutBucketVersioning through beta answer (times
printed: they wait for alpha's dead watches, up to their 10 s lease), and a Deny policy set
through beta holds on beta at once.
The plane's bucket API (it runs no gateway) works through the nodes' gateways, and a key made
through it names a node's gateway as its endpoint: a bucket made
through it takes a PUT through alpha read back through beta, usage and settings go both ways,
a non-empty bucket is refused deletion, and with alpha dead it lists through beta."""
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

from tests.cluster_support import ceph_nodes
from tests.kit import wait_for

pytestmark = pytest.mark.root

ADDRESSES = {"alpha": "127.0.0.2", "beta": "127.0.0.3"}


@pytest.fixture(scope="module")
def cluster(ceph_cluster):
    """The plane with the RADOS store on a Ceph pool; alpha and beta serving S3; an S3 key."""
    with ceph_nodes(ceph_cluster, ADDRESSES, "object", pool_options={}) as c:
        key = c.api("POST", "s3-keys/", json={"user": "tester", "admin": True})
        assert key.status_code == 201, key.text
        c.key = key.json()
        yield c


def client(cluster, name: str, key: dict | None = None):
    key = key or cluster.key
    return boto3.client(
        "s3", endpoint_url=f"http://{ADDRESSES[name]}:{cluster.ports[name]}",
        aws_access_key_id=key["access_key"],
        aws_secret_access_key=key["secret_key"], region_name="us-east-1",
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


def test_the_plane_bucket_api_works_through_the_nodes_gateways(cluster):
    """`strata plane` runs no gateway: its bucket API calls a node's (services.object
    ``admin_endpoints``); what it does holds on every node at once."""
    a, b = serving(cluster, "alpha"), serving(cluster, "beta")
    for name in ADDRESSES:     # the plane calls the gateways their nodes report running
        wait_for(lambda: (cluster.node(name)["daemons"].get("s3") or {}).get("state"), 30,
                 f"{name}'s gateway reported running", until=lambda s: s == "running")
    # a key made now names an endpoint that serves it: a node's gateway (not the plane's
    # own address, where nothing answers S3)
    key = cluster.api("POST", "s3-keys/", json={"user": "endpoint-user"})
    assert key.status_code == 201, key.text
    endpoints = {f"http://{a}:{cluster.ports[n]}": n for n, a in ADDRESSES.items()}
    assert key.json()["endpoint"] in endpoints, (key.json()["endpoint"], endpoints)
    given = client(cluster, endpoints[key.json()["endpoint"]], key.json())
    wait_for(lambda: given.list_buckets() is not None, 180, "the new key served at its endpoint",
             interval=1, ignore=(ClientError, BotoCoreError))
    bucket, other = f"api-{uuid.uuid4().hex[:8]}", f"s3-{uuid.uuid4().hex[:8]}"
    made = cluster.api("POST", "buckets/", json={"name": bucket, "owner": "tester"})
    assert made.status_code == 201, made.text
    body = os.urandom(200_000)
    a.put_object(Bucket=bucket, Key="k", Body=body)
    assert b.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    row = cluster.api("GET", f"buckets/{bucket}/").json()
    assert (row["owner"], row["used_bytes"], row["used_objects"]) == ("tester", 200_000, 1), row
    # a bucket made over S3 is listed; settings set through the API hold on every node
    b.create_bucket(Bucket=other)
    listed = {x["name"]: x for x in cluster.api("GET", "buckets/").json()["results"]}
    assert {bucket, other} <= set(listed) and listed[bucket]["used_bytes"] == 200_000
    changed = cluster.api("PATCH", f"buckets/{other}/", json={"versioning": "Enabled"})
    assert changed.status_code == 200 and changed.json()["versioning"] == "Enabled", changed.text
    assert a.get_bucket_versioning(Bucket=other)["Status"] == "Enabled"
    policy = {"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{other}/*"}]}
    put = cluster.api("PUT", f"buckets/{other}/policy/", json={"policy": policy})
    assert put.status_code == 200, put.text
    assert json.loads(b.get_bucket_policy(Bucket=other)["Policy"]) == policy
    # a non-empty bucket is not deleted; an empty one is gone from every node
    refused = cluster.api("DELETE", f"buckets/{bucket}/")
    assert refused.status_code == 409 and refused.json()["error"] == "BucketNotEmpty", refused.text
    assert a.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    b.delete_object(Bucket=bucket, Key="k")
    assert cluster.api("DELETE", f"buckets/{bucket}/").status_code == 204
    with pytest.raises(ClientError) as gone:
        a.head_bucket(Bucket=bucket)
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


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
    # any node decrypts what another encrypted: each holds the plane's SSE master key and
    # KMS keys (as it holds every S3 secret)
    assert node_config["sse_master_key"] and node_config["sse_master_key"] == plane["sse_master_key"]
    assert node_config.get("kms_keys") == plane.get("kms_keys")
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    a.create_bucket(Bucket=bucket)
    body = os.urandom(300_000)
    a.put_object(Bucket=bucket, Key="shard-0", Body=body)
    assert b.get_object(Bucket=bucket, Key="shard-0")["Body"].read() == body
    a.put_object(Bucket=bucket, Key="sealed", Body=body, ServerSideEncryption="AES256")
    got = b.get_object(Bucket=bucket, Key="sealed")
    assert (got["ServerSideEncryption"], got["Body"].read()) == ("AES256", body)

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

    # a user's key (admin keys pass any bucket policy), served by beta
    made = cluster.api("POST", "s3-keys/", json={"user": "reader"})
    assert made.status_code == 201, made.text
    reader = client(cluster, "beta", made.json())
    wait_for(lambda: reader.list_buckets() is not None, 180, "beta serving the user's key",
             interval=1, ignore=(ClientError, BotoCoreError))

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
        # bucket changes through beta at once: they wait for alpha's dead watches of the
        # registry and of the bucket's settings, up to their lease (rados_buckets.WATCH_TIMEOUT)
        b.create_bucket(Bucket=f"{bucket}-after")
        took = {"CreateBucket": time.monotonic() - state["killed"]}
        b.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        took["PutBucketVersioning"] = time.monotonic() - state["killed"]
        print("after alpha's kill -9, through beta: " + ", ".join(
            f"{op} answered {t:.1f} s after the kill" for op, t in took.items()))
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
    pages = b.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="loop/")
    listed = {o["Key"] for page in pages for o in page.get("Contents", [])}
    missing = set(acked) - listed
    assert not missing, (len(missing), sorted(missing)[:5], len(acked), len(listed))
    assert b.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    b.head_bucket(Bucket=f"{bucket}-after")
    # a policy set through beta holds on beta from its answer on: Allow, then Deny
    for effect in ("Allow", "Deny"):
        b.put_bucket_policy(Bucket=bucket, Policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{
                "Effect": effect, "Principal": {"AWS": ["reader"]}, "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*"}]}))
        if effect == "Allow":
            assert reader.get_object(Bucket=bucket, Key="shard-0")["Body"].read() == body
    with pytest.raises(ClientError) as denied:
        reader.get_object(Bucket=bucket, Key="shard-0")
    assert denied.value.response["Error"]["Code"] == "AccessDenied"
    # nothing of the buckets on the node's disk: its data root holds run files only
    assert not (cluster.agent_data("beta") / "run" / "s3" / "rados" / "buckets").exists()
    # the plane's bucket API goes on through beta (alpha refuses connections until it is
    # written down, then is no longer tried): the listing imports the bucket made over S3
    # with its usage (a read: a create would wait up to 30 s for the notify that alpha's
    # dead watch holds, services/object/README.md)
    listed = cluster.api("GET", "buckets/").json()["results"]
    row = next(x for x in listed if x["name"] == bucket)
    assert row["used_objects"] >= len(acked) + 2, row
