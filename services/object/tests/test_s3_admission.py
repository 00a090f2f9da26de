"""The gateway admits object requests by class of work: while slow uploads to a checkpoints
bucket hold every slot that class may take and more checkpoint PUTs wait in its queue, a GET
of a samples bucket is served at once (services/object/gateway/admission.py)."""
from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest

from services.object.tests.gatewayproc import ACCESS, ADMIN_TOKEN, SECRET, GatewayProcess
from services.object.tests.s3raw import request_head, sign

SLOW_SIZE = 1 << 20


def admission(gw) -> dict:
    req = urllib.request.Request(f"{gw.endpoint}/_strata/admin/admission",
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["classes"]


def wait_for(gw, check, what: str, patience: float = 30.0) -> dict:
    """Poll the gateway's admission until ``check(classes)``; the failure says what it saw."""
    deadline = time.monotonic() + patience
    while True:
        seen = admission(gw)
        if check(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: the gateway's admission is {seen}")
        time.sleep(0.05)


def start_slow_upload(gw, bucket: str, key: str) -> socket.socket:
    """A PUT that sends its headers and the first KiB of a 1 MiB body, then pauses."""
    url = f"{gw.endpoint}/{bucket}/{key}"
    headers = sign("PUT", url, ACCESS, SECRET, headers={"Content-Length": str(SLOW_SIZE)})
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
    sock.sendall(request_head("PUT", url, headers) + b"x" * 1024)
    return sock


def finish_slow_upload(sock: socket.socket) -> int:
    sock.sendall(b"x" * (SLOW_SIZE - 1024))
    status = int(sock.makefile("rb").readline().split(b" ", 2)[1])
    sock.close()
    return status


@pytest.fixture
def qos_gateway():
    # 4 slots: each class reserves one, so checkpoints may hold 2 (1 while samples are read)
    with GatewayProcess.running(workers=1, qos={"slots": 4, "buckets": {"ckpt": "checkpoints"},
                                                "shares": {"samples": 1000, "checkpoints": 400,
                                                           "background": 50}}) as gw:
        yield gw


def test_samples_get_is_served_while_checkpoint_uploads_fill_their_class(qos_gateway):
    gw = qos_gateway
    s3 = gw.client()
    s3.create_bucket(Bucket="ckpt")
    s3.create_bucket(Bucket="train")
    sample = bytes(range(256)) * 4096
    s3.put_object(Bucket="train", Key="sample-0", Body=sample)

    slow = [start_slow_upload(gw, "ckpt", f"rank{i}") for i in range(2)]
    queued, results = None, {}
    try:
        wait_for(gw, lambda c: c["checkpoints"]["in_flight"] == 2, "two slow uploads admitted")

        # one more checkpoint PUT: its class is full, it waits in the queue
        def third_put():
            results["third"] = gw.client().put_object(Bucket="ckpt", Key="rank2", Body=b"y" * 4096)
        queued = threading.Thread(target=third_put)
        queued.start()
        wait_for(gw, lambda c: c["checkpoints"]["waiting"] == 1, "a third checkpoint PUT queued")

        # a reader of samples is not behind them
        got = s3.get_object(Bucket="train", Key="sample-0")["Body"].read()
        assert got == sample
        assert "third" not in results          # still queued: the slow uploads hold the slots
        seen = admission(gw)["checkpoints"]
        assert (seen["in_flight"], seen["waiting"]) == (2, 1), seen
    finally:
        statuses = [finish_slow_upload(sock) for sock in slow]
        if queued is not None:
            queued.join(30)
    assert statuses == [200, 200]
    assert results["third"]["ResponseMetadata"]["HTTPStatusCode"] == 200
    sizes = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket="ckpt")["Contents"]}
    assert sizes == {"rank0": SLOW_SIZE, "rank1": SLOW_SIZE, "rank2": 4096}
    assert admission(gw)["checkpoints"]["in_flight"] == 0


def test_a_checkpoint_burst_alone_may_take_the_slots_but_gives_way_to_a_reader():
    from services.object.gateway.admission import Admission

    adm = Admission()
    adm.configure({"slots": 16, "shares": {"samples": 1000, "checkpoints": 400, "background": 50}})
    now = time.monotonic()
    # alone: every slot but the reserves of samples (2) and background (1)
    assert adm.cap("checkpoints", now) == 13
    # while samples are read: its share among the active classes, 16 x 400 / 1400
    adm.seen["samples"] = now
    assert adm.cap("checkpoints", now) == 4
    assert adm.cap("samples", now) == 14      # checkpoints idle: all but the others' reserves
    adm.seen["checkpoints"] = now
    assert adm.cap("samples", now) == 11      # both active: 16 x 1000 / 1400
    # with equal shares nothing is favoured
    adm.configure({"slots": 16, "shares": {"samples": 100, "checkpoints": 100, "background": 100}})
    assert adm.cap("checkpoints", now) == adm.cap("samples", now) == 8
