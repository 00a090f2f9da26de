"""Worker restarts of the S3 gateway are in the plane's health: a worker killed (SIGKILL)
is started again by the gateway's parent, and /api/v1/health shows the count and the reason."""
from __future__ import annotations

import json
import os
import signal

from services.object import gatewayconf
from services.object.tests.planefixture import start_plane_gateway, stop_procs
from tests.kit import children, wait_for


def test_health_shows_worker_restarts(api, data_dir, settings):
    started = start_plane_gateway(api, data_dir, settings, options={"s3_workers": 2})
    try:
        s3 = api.get("/api/v1/health").json()["services"]["object"]["s3"]
        assert s3["state"] == "ok" and s3["worker_restarts"] == 0 and s3["last_worker_restart"] is None
        assert s3["workers"] == {"0": "running", "1": "running"}
        parent = started.procs[0].pid  # the launcher became the gateway's parent (exec)
        victim = wait_for(lambda: len(children(parent)) == 2 and children(parent), 30, "two workers")[1]
        os.kill(victim, signal.SIGKILL)
        record = gatewayconf.workers_path(data_dir)
        wait_for(lambda: json.loads(record.read_text())["restarts"] == 1
                 and victim not in children(parent) and len(children(parent)) == 2, 30, "the worker restarted")
        s3 = api.get("/api/v1/health").json()["services"]["object"]["s3"]
        assert s3["worker_restarts"] == 1
        assert s3["last_worker_restart"]["reason"] == "SIGKILL"
        assert s3["last_worker_restart"]["pid"] == victim
        wait_for(lambda: api.get("/api/v1/health").json()["services"]["object"]["s3"]["workers"]
                 == {"0": "running", "1": "running"}, 30, "both workers running")
        s3_client = started.admin_s3
        s3_client.create_bucket(Bucket="after-restart")
    finally:
        stop_procs(started.procs)
