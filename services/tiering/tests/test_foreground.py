"""Foreground traffic pre-empts background work, end to end: an object PUT or GET through a
real S3 gateway and a checkpoint begin through the API mark foreground traffic in the
budget's Redis, and while the mark holds a background take gets only the foreground share."""
import time

import boto3
import pytest
from botocore.config import Config
from django.conf import settings

from services.object.tests.gatewayproc import ACCESS, SECRET, GatewayProcess
from plumbing.iobudget import (
    FOREGROUND_KEY,
    PREFIX,
    BudgetConfig,
    ForegroundMarker,
    IOBudget,
)
from plumbing.redisurl import redis_from_url
from tests.kit import wait_for

MiB = 1 << 20


@pytest.fixture
def redis_db():
    client = redis_from_url(settings.CELERY_BROKER_URL)
    for key in client.scan_iter(PREFIX + "*"):
        client.delete(key)
    yield client
    for key in client.scan_iter(PREFIX + "*"):
        client.delete(key)


def wait_for_mark(client, timeout=10.0):
    """The gateway writes the mark on an I/O thread just after the request."""
    return wait_for(lambda: client.exists(FOREGROUND_KEY), timeout, "the foreground mark",
                    interval=0.02)


def background_wait(client) -> float:
    """Seconds a 1 MiB background take waits on an emptied 10 MiB/s bucket (clock given)."""
    b = IOBudget(client, BudgetConfig(rate=10 * MiB, burst=10 * MiB, foreground_share=0.1))
    for key in client.scan_iter(PREFIX + "appliance"):
        client.delete(key)
    assert b.try_take(10 * MiB, "migration", now=0.0) == 0
    return b.try_take(1 * MiB, "migration", now=0.0)


def test_gateway_put_and_get_mark_foreground_and_background_yields(tmp_path, redis_db):
    assert background_wait(redis_db) == pytest.approx(0.1)   # nobody in the foreground
    gw = GatewayProcess(str(tmp_path), io_budget_redis=settings.CELERY_BROKER_URL)
    gw.start()
    try:
        s3 = boto3.client("s3", endpoint_url=gw.endpoint, aws_access_key_id=ACCESS,
                          aws_secret_access_key=SECRET, region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}))
        s3.create_bucket(Bucket="ckpt")
        assert not redis_db.exists(FOREGROUND_KEY)            # bucket calls are not I/O
        s3.put_object(Bucket="ckpt", Key="rank0.bin", Body=b"x" * MiB)
        assert wait_for_mark(redis_db)
        assert 0 < redis_db.pttl(FOREGROUND_KEY) <= 2000
        assert background_wait(redis_db) == pytest.approx(1.0)  # 10x slower meanwhile

        time.sleep(1.1)            # the gateway writes the mark at most once a second
        redis_db.delete(FOREGROUND_KEY)
        assert s3.get_object(Bucket="ckpt", Key="rank0.bin")["Body"].read() == b"x" * MiB
        assert wait_for_mark(redis_db)
    finally:
        gw.stop()


def test_marker_writes_at_most_once_a_second_and_survives_a_missing_redis(redis_db):
    marker = ForegroundMarker(redis_db)
    assert marker() is True and redis_db.exists(FOREGROUND_KEY)
    redis_db.delete(FOREGROUND_KEY)
    assert marker() is False and not redis_db.exists(FOREGROUND_KEY)   # within the second
    away = ForegroundMarker(redis_from_url("redis://127.0.0.1:1/0", timeout=0.5))
    assert away() is False        # logged, never raised: foreground work goes on


@pytest.mark.root
@pytest.mark.django_db
def test_checkpoint_begin_marks_foreground(api, redis_db):
    from services.checkpoints.tests.conftest import begin, make_job
    from plane.iobudget import forget_cached

    make_job(api)
    forget_cached()
    redis_db.delete(FOREGROUND_KEY)
    begin(api, "llm", 100)
    assert redis_db.exists(FOREGROUND_KEY)
    assert background_wait(redis_db) == pytest.approx(1.0)


@pytest.mark.root
def test_on_a_real_appliance_the_plane_points_the_gateway_at_the_budget():
    """`strata up`: the plane writes the broker's Redis (a unix socket) into the gateway's
    config, and a PUT through the appliance's S3 endpoint marks foreground traffic there."""
    import json

    from tests.appliance import Appliance

    app = Appliance()
    try:
        app.start()
        config = json.loads((app.data_dir / "run" / "s3" / "gateway.json").read_text())
        url = config["io_budget_redis"]
        assert url.startswith("redis+socket://"), url
        client = redis_from_url(url)
        client.delete(FOREGROUND_KEY)
        creds = app.credentials
        s3 = boto3.client("s3", endpoint_url=creds["s3_endpoint"],
                          aws_access_key_id=creds["s3_access_key"],
                          aws_secret_access_key=creds["s3_secret_key"], region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}))
        s3.create_bucket(Bucket="ckpt")
        s3.put_object(Bucket="ckpt", Key="rank0.bin", Body=b"x" * MiB)
        assert wait_for_mark(client)
    finally:
        app.destroy()
