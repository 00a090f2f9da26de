"""A real gateway subprocess on a free port with a temporary config and data root."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import boto3
from botocore.config import Config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ACCESS, SECRET = "STRATAADMINKEY", "strata-admin-secret"
USER_ACCESS, USER_SECRET = "ALICEKEY", "alice-secret"
ADMIN_TOKEN = "test-admin-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GatewayProcess:
    """One gateway subprocess; ``restart`` keeps its data, ``kill9`` simulates a crash."""

    def __init__(self, workdir: str, **settings):
        self.workdir = workdir
        self.config_path = os.path.join(workdir, "gateway.json")
        self.data_root = os.path.join(workdir, "data")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.settings = settings
        self.env: dict[str, str] = {}  # extra environment of the next start (fault injection)
        self.write_config({
            ACCESS: {"secret_key": SECRET, "user": "admin", "admin": True},
            USER_ACCESS: {"secret_key": USER_SECRET, "user": "alice", "admin": False},
        })

    def write_config(self, users: dict) -> None:
        cfg = {"data_root": self.data_root, "region": "us-east-1", "admin_token": ADMIN_TOKEN,
               "domains": ["localhost"], "users": users, **self.settings}
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(cfg, fh)
        os.replace(tmp, self.config_path)

    def start(self) -> None:
        log = open(os.path.join(self.workdir, "gateway.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.object.gateway", "--config", self.config_path,
             "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}; see {self.workdir}/gateway.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("gateway did not start listening in 20 s")

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def client(self, access=ACCESS, secret=SECRET, **config):
        config.setdefault("max_pool_connections", 64)
        cfg = Config(s3={"addressing_style": config.pop("addressing_style", "path")}, signature_version="s3v4",
                     retries={"max_attempts": 1}, **config)
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=access,
                            aws_secret_access_key=secret, region_name="us-east-1", config=cfg)
