"""The plane gives the S3 gateway a cold root on the appliance's capacity pool (and only
then are lifecycle transitions accepted), checked with boto3 against a gateway started the
way `strata up` starts it."""
from __future__ import annotations

import json
import os

import pytest
from botocore.exceptions import ClientError

from services.object import tasks
from services.object.tests.planefixture import start_plane_gateway, stop_procs
from services.storage import tasks as storage_tasks
from services.storage.models import FileSystem, Pool
from tests.kit import run_job, wait_job

pytestmark = pytest.mark.django_db(transaction=True)

GLACIER_IR_RULE = {"Rules": [{"ID": "cold", "Filter": {"Prefix": ""}, "Status": "Enabled",
                              "Transitions": [{"Days": 30, "StorageClass": "GLACIER_IR"}]}]}


def _config(data_dir) -> dict:
    return json.loads((data_dir / "run" / "s3" / "gateway.json").read_text())


def test_capacity_pool_gives_the_gateway_a_cold_root(api, data_dir, settings):
    made = api.post("/api/v1/pools/", {"name": "slow", "driver": "directory", "media": "capacity"}, format="json")
    assert made.status_code == 201, made.content
    plane = start_plane_gateway(api, data_dir, settings)
    try:
        fs = FileSystem.objects.get(name="s3-cold-slow")
        assert fs.pool.name == "slow"
        config = _config(data_dir)
        assert config["cold_root"].startswith(fs.path) and os.path.isdir(config["cold_root"])
        assert config["io_budget"]["rate"] == 0  # the appliance default: unlimited
        r = api.put("/api/v1/io-budget/1/", {"rate_mbps": 200, "burst_mb": 0, "foreground_share": 0.2,
                                             "class_rates_mbps": {"migration": 50}}, format="json")
        assert r.status_code == 200, r.content
        budget = _config(data_dir)["io_budget"]
        assert budget["rate"] == 200 << 20 and budget["classes"] == {"migration": 50 << 20}
        s3 = plane.admin_s3
        s3.create_bucket(Bucket="tiered")
        s3.put_bucket_lifecycle_configuration(Bucket="tiered", LifecycleConfiguration=GLACIER_IR_RULE)
        rules = s3.get_bucket_lifecycle_configuration(Bucket="tiered")["Rules"]
        assert rules[0]["Transitions"][0]["StorageClass"] == "GLACIER_IR"
        # the cold file system cannot go while an object's cold bytes are there
        held = os.path.join(config["cold_root"], "buckets", "tiered", "ab", "abcdef")
        os.makedirs(os.path.dirname(held))
        open(held, "wb").close()
        refused = api.delete("/api/v1/filesystems/s3-cold-slow/")
        assert refused.status_code == 409 and "cold bytes" in refused.json()["detail"]
        os.unlink(held)
        assert api.delete("/api/v1/filesystems/s3-cold-slow/").status_code in (200, 202, 204)
        assert "cold_root" not in _config(data_dir)
    finally:
        stop_procs(plane.procs)


def test_without_a_capacity_pool_transitions_are_refused_with_the_reason(api, data_dir, settings):
    plane = start_plane_gateway(api, data_dir, settings)
    try:
        assert "cold_root" not in _config(data_dir)
        s3 = plane.admin_s3
        s3.create_bucket(Bucket="flat")
        with pytest.raises(ClientError) as e:
            s3.put_bucket_lifecycle_configuration(Bucket="flat", LifecycleConfiguration=GLACIER_IR_RULE)
        assert e.value.response["Error"]["Code"] == "InvalidStorageClass"
        assert "capacity" in e.value.response["Error"]["Message"]
    finally:
        stop_procs(plane.procs)


def test_a_capacity_pool_made_while_the_gateway_runs_gives_it_a_cold_root_at_once(
        api, data_dir, settings):
    """No restart: the pool's creation re-renders the config the running gateway re-reads;
    the pool going away (its directory lost, as the periodic reconcile records it) takes the
    cold root out again, and its return puts it back."""

    plane = start_plane_gateway(api, data_dir, settings)
    try:
        s3 = plane.admin_s3
        s3.create_bucket(Bucket="later")
        with pytest.raises(ClientError) as e:
            s3.put_bucket_lifecycle_configuration(Bucket="later",
                                                  LifecycleConfiguration=GLACIER_IR_RULE)
        assert e.value.response["Error"]["Code"] == "InvalidStorageClass"

        made = api.post("/api/v1/pools/", {"name": "slow", "driver": "directory",
                                           "media": "capacity"}, format="json")
        assert made.status_code == 201, made.content
        fs = FileSystem.objects.get(name="s3-cold-slow")
        cold_root = _config(data_dir)["cold_root"]
        assert cold_root.startswith(fs.path) and os.path.isdir(cold_root)
        s3.put_bucket_lifecycle_configuration(Bucket="later",
                                              LifecycleConfiguration=GLACIER_IR_RULE)
        rules = s3.get_bucket_lifecycle_configuration(Bucket="later")["Rules"]
        assert rules[0]["Transitions"][0]["StorageClass"] == "GLACIER_IR"

        # the capacity pool goes away: the reconcile marks it, the cold root goes with it
        pool_dir = Pool.objects.get(name="slow").mountpoint
        os.rename(pool_dir, pool_dir + ".away")
        try:
            storage_tasks.reconcile_all()
            assert Pool.objects.get(name="slow").state not in ("online", "degraded")
            assert "cold_root" not in _config(data_dir)
            with pytest.raises(ClientError) as e:
                s3.put_bucket_lifecycle_configuration(Bucket="later",
                                                      LifecycleConfiguration=GLACIER_IR_RULE)
            assert e.value.response["Error"]["Code"] == "InvalidStorageClass"
        finally:
            os.rename(pool_dir + ".away", pool_dir)
        storage_tasks.reconcile_all()  # back online: the same cold root again
        assert Pool.objects.get(name="slow").state == "online"
        assert _config(data_dir)["cold_root"] == cold_root
        s3.put_bucket_lifecycle_configuration(Bucket="later",
                                              LifecycleConfiguration=GLACIER_IR_RULE)
    finally:
        stop_procs(plane.procs)


def test_lifecycle_passes_are_jobs_that_move_versions_to_the_capacity_tier(
        api, viewer_api, data_dir, settings, worker):
    """The plane runs the lifecycle passes (the gateway it starts runs none of its own):
    each is a Job, on request or from beat, whose result counts the versions moved and whose
    byte count is their bytes; the moved versions still read back (GLACIER_IR)."""

    made = api.post("/api/v1/pools/", {"name": "slow", "driver": "directory",
                                       "media": "capacity"}, format="json")
    assert made.status_code == 201, made.content
    assert "skipped" in tasks.lifecycle()  # no gateway yet: beat's pass waits, no failed Job
    plane = start_plane_gateway(api, data_dir, settings)
    try:
        assert _config(data_dir)["lifecycle_interval"] == 0
        s3 = plane.admin_s3
        s3.create_bucket(Bucket="tiered")
        bodies = {f"ckpt/step-1/shard-{i}": os.urandom(200_000 + i) for i in range(3)}
        for key, body in bodies.items():
            s3.put_object(Bucket="tiered", Key=key, Body=body)
        s3.put_object(Bucket="tiered", Key="hot/keep", Body=b"stays hot")
        s3.put_bucket_lifecycle_configuration(Bucket="tiered", LifecycleConfiguration={
            "Rules": [{"ID": "old-steps", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
                       "Transitions": [{"Date": "2020-01-01T00:00:00Z",
                                        "StorageClass": "GLACIER_IR"}]}]})

        assert viewer_api.post("/api/v1/s3-lifecycle-runs/").status_code == 403
        job = run_job(api, "/api/v1/s3-lifecycle-runs/")
        assert job["state"] == "succeeded" and job["kind"] == "lifecycle", job
        assert job["result"]["transitioned"] == 3, job["result"]
        moved = sum(len(b) for b in bodies.values())
        assert job["bytes_done"] == job["bytes_total"] == moved, job
        for key, body in bodies.items():
            assert s3.head_object(Bucket="tiered", Key=key)["StorageClass"] == "GLACIER_IR"
            assert s3.get_object(Bucket="tiered", Key=key)["Body"].read() == body
        assert s3.head_object(Bucket="tiered", Key="hot/keep").get("StorageClass", "STANDARD") == \
            "STANDARD"

        # beat's hourly task queues the same Job; a pass with nothing to do moves nothing
        again = wait_job(api, tasks.lifecycle()["job"])
        assert again["state"] == "succeeded" and again["result"]["transitioned"] == 0, again
    finally:
        stop_procs(plane.procs)
