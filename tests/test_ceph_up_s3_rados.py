"""`strata up --s3-store rados --s3-pool POOL` on one host, end to end: the appliance's own
gateway keeps its buckets in the RADOS pool of a Ceph pool of the session's cluster, created
while `strata up` runs (S3 starts then, without a restart). A bucket
made through the REST API takes boto3 PUTs (inline and data objects) and GETs; the gateway
killed -9 is started again by `strata up` and every object reads back; the buckets are not
on the host's disk. (Every node serving them: tests/test_ceph_cluster_s3.py.)"""
from __future__ import annotations

import json
import os
import signal
import time
import uuid

import pytest

from tests.appliance import Appliance
from tests.ceph import ceph_pool_body
from tests.kit import wait_for
from tests.test_ceph_restart import START_TIMEOUT, s3_client
from tests.test_daemon_restarts import created, recorded, rest

pytestmark = pytest.mark.root


def test_strata_up_with_the_rados_store_serves_buckets_and_survives_a_gateway_kill(ceph_cluster):
    pool = f"ur{uuid.uuid4().hex[:6]}"
    app = Appliance(pool_size="1G", extra_args=["--s3-pool", pool, "--s3-store", "rados",
                                                "--s3-workers", "1"])
    try:
        app.start(timeout=START_TIMEOUT)      # S3 waits: its pool does not exist yet
        created(app, "pools/", ceph_pool_body(ceph_cluster, pool))
        made = time.monotonic()               # no restart: S3 starts once the pool exists
        wait_for(lambda: s3_client(app).list_buckets() is not None, START_TIMEOUT,
                 "S3 answering once its pool exists", ignore=(Exception,))
        took = time.monotonic() - made
        config = json.loads((app.data_dir / "run" / "s3" / "gateway.json").read_text())
        assert (config["store"]["kind"], config["store"]["client"]) == ("rados",
                                                                        ceph_cluster.client)
        bucket = f"up-{uuid.uuid4().hex[:8]}"
        created(app, "buckets/", {"name": bucket})
        s3 = s3_client(app)
        bodies = {"small": os.urandom(3000), "large": os.urandom(600_000)}
        for key, body in bodies.items():
            s3.put_object(Bucket=bucket, Key=key, Body=body)
        for key, body in bodies.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
        status, row = rest(app, "GET", f"buckets/{bucket}/")
        assert status == 200 and (row["used_bytes"], row["used_objects"]) == (603_000, 2), row

        before = recorded(app)["s3"]
        os.kill(before["pid"], signal.SIGKILL)
        t0 = time.monotonic()
        wait_for(lambda: recorded(app)["s3"]["restarts"] == before["restarts"] + 1
                 and recorded(app)["s3"]["state"] == "running", 120, "s3 started again")

        def reads_back() -> bool:
            s3 = s3_client(app)
            return all(s3.get_object(Bucket=bucket, Key=k)["Body"].read() == b
                       for k, b in bodies.items())
        wait_for(lambda: reads_back(), 60, "the objects read back after the kill",
                 ignore=(Exception,))
        print(f"\npool created to S3 answering (RADOS store): {took:.1f} s; kill -9 of the gateway "
              f"to every object read back: {time.monotonic() - t0:.1f} s")
        assert recorded(app)["s3"]["last_exit"]["signal"] == "SIGKILL"
        refused = rest(app, "DELETE", f"buckets/{bucket}/")
        assert refused[0] == 409 and refused[1]["error"] == "BucketNotEmpty", refused
        # the buckets are in RADOS: the gateway's local data root holds run files only
        assert not (app.data_dir / "run" / "s3" / "rados" / "buckets").exists()
    finally:
        app.destroy()
