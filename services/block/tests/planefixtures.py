"""Fixtures for the block plane tests: the daemons `strata up` would start (from
services/block/up.py), at free ports, stopped by PID after the test; helpers for REST."""
import os
import subprocess

import pytest

from plumbing.process import Child
from services.block import up
from services.block.tests.conftest import need
from tests.kit import free_port

MiB = 1 << 20
CLIENT = "iqn.2026-01.io.strata.test:client1"
OTHER = "iqn.2026-01.io.strata.test:intruder"
SECRET = "s3cret-chap-01"


def start_specs(specs, log_dir):
    """Start DaemonSpecs the way `strata up` does; returns the started Children."""
    started = []
    try:
        for spec in specs:
            child = Child(spec.name, spec.argv, os.path.join(log_dir, f"{spec.name}.log"),
                          env={**os.environ, **spec.env}, stop=spec.stop).start()
            started.append(child)
            child.wait_ready(spec.ready, 20)
    except BaseException:
        stop_specs(started)
        raise
    return started


def stop_specs(started):
    """Stop in reverse order: the spec's stop(), then SIGTERM, then SIGKILL, by PID."""
    for child in reversed(started):
        child.stop(10, on_error=lambda exc, name=child.name: print(f"stopping {name}: {exc}"))


@pytest.fixture(name="block")
def block_daemons(data_dir, settings):
    """tgtd and qemu-storage-daemon from up.daemons() at free ports; the plane's options
    (``options["started"]`` lists the running Children)."""
    need("tgtd", "tgtadm", "qemu-storage-daemon", "iscsi-inq", "iscsi-readcapacity16",
         "qemu-img", "nbdcopy")
    options = {"host": "127.0.0.1", "port": 8080, "iscsi_port": free_port(),
               "nbd_port": free_port()}
    settings.SERVICE_OPTIONS = options
    options["started"] = start_specs(up.daemons(data_dir, options), str(data_dir))
    try:
        yield options
    finally:
        stop_specs(options["started"])


def make_volume(api, name="v1", size=64 * MiB, pool="p1"):
    if api.get(f"/api/v1/pools/{pool}/").status_code == 404:
        r = api.post("/api/v1/pools/", {"name": pool, "driver": "directory"}, format="json")
        assert r.status_code == 201, r.json()
    r = api.post("/api/v1/volumes/", {"name": name, "size_bytes": size, "pool": pool},
                 format="json")
    assert r.status_code == 201, r.json()
    return r.json()


def post(api, path, body, expect=201):
    r = api.post(path, body, format="json")
    assert r.status_code == expect, (r.status_code, r.json())
    return r.json()


def iscsi_url(exp, user="client1", secret=SECRET):
    auth = f"{user}%{secret}@" if user else ""
    return f"iscsi://{auth}{exp['portal']}/{exp['target_iqn']}/{exp['lun']}"


def iscsi_tool(name, exp, initiator=CLIENT, **kw):
    return subprocess.run([name, "-i", initiator, iscsi_url(exp, **kw)], capture_output=True,
                          check=False,
                          text=True, timeout=60)


def capacity(exp, **kw):
    cp = iscsi_tool("iscsi-readcapacity16", exp, **kw)
    assert cp.returncode == 0, cp.stderr
    return int(cp.stdout.split("Total size:")[1].split()[0])
