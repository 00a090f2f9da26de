"""A plane with its S3 gateway: a `directory` pool named default, the gateway started from
``services.object.up`` at a free port, and the object bootstrap run (as `strata up` does)."""
from __future__ import annotations

import os
import signal
import subprocess
from types import SimpleNamespace

import boto3
import pytest
from botocore.config import Config

from services.object import bootstrap, up
from tests.kit import free_port, wait_for


def s3_client(endpoint: str, access: str, secret: str):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=access,
                        aws_secret_access_key=secret, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                                      retries={"max_attempts": 1}))


def start_plane_gateway(api, data_dir, settings, pool: dict | None = None,
                        options: dict | None = None):
    """Start what `strata up` starts for the object service; returns a namespace with
    ``creds``, ``endpoint``, ``procs`` (stop them with :func:`stop_procs`). The pool named
    default is a `directory` one unless ``pool`` says otherwise; ``options`` adds service
    options (other services' ports)."""
    port = free_port()
    settings.SERVICE_OPTIONS = {**(options or {}), "s3_port": port, "host": "127.0.0.1"}
    made = api.post("/api/v1/pools/", {"name": "default", "driver": "directory", **(pool or {})},
                    format="json")
    assert made.status_code == 201, made.content
    procs = start_launcher(data_dir, settings.SERVICE_OPTIONS)
    try:
        creds = bootstrap.bootstrap({"username": "admin"})
    except BaseException:
        stop_procs(procs)
        raise
    return SimpleNamespace(creds=creds, endpoint=creds["s3_endpoint"], procs=procs, port=port,
                           admin_s3=s3_client(creds["s3_endpoint"], creds["s3_access_key"],
                                              creds["s3_secret_key"]))


def start_launcher(data_dir, options: dict) -> list:
    """The object service's daemons as `strata up` starts them (the gateway's launcher, which
    waits for the bootstrap's gate), each ready; returns their processes."""
    procs = []
    try:
        for spec in up.daemons(data_dir, options):
            with open(data_dir / f"{spec.name}.log", "ab") as log:
                procs.append(subprocess.Popen(spec.argv, env={**os.environ, **spec.env}, stdout=log,
                                              stderr=subprocess.STDOUT, cwd=data_dir))
            proc = procs[-1]

            def ready(spec=spec, proc=proc):
                if spec.ready():
                    return True
                assert proc.poll() is None, (data_dir / f"{spec.name}.log").read_text()
                return False

            wait_for(ready, 30, f"{spec.name} to be ready", interval=0.05)
    except BaseException:
        stop_procs(procs)
        raise
    return procs


def stop_procs(procs) -> None:
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def plane(api, data_dir, settings):
    """The plane's S3 gateway for one test, stopped after it (a test module imports this)."""
    started = start_plane_gateway(api, data_dir, settings)
    try:
        yield started
    finally:
        stop_procs(started.procs)
