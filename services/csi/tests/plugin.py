"""Test support: the CSI plugin as a subprocess on a unix socket, and a gRPC client of it."""
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc

from plumbing.restclient import RestClient
from services.csi.proto import csi_pb2_grpc

ROOT = Path(__file__).resolve().parents[3]


def local_node(api_url: str, token: str) -> str:
    """The name of the appliance's own node (`strata up`'s: it serves every pool). A node
    plugin named so is in the topology of every volume (services.csi.topology)."""
    rows = RestClient(api_url, token).get("nodes/")
    rows = rows.get("results", []) if isinstance(rows, dict) else rows
    return next(r["name"] for r in rows if r["local"])


class Plugin:
    """``python -m services.csi`` in ``workdir`` (socket csi.sock, log plugin.log)."""

    def __init__(self, workdir: Path, plane_url: str, token: str | None, mode: str = "all",
                 node_id: str = "sanity-node"):
        self.workdir = Path(workdir)
        self.socket = self.workdir / "csi.sock"
        self.endpoint = f"unix://{self.socket}"
        self.log = self.workdir / "plugin.log"
        self.args = [sys.executable, "-m", "services.csi", "--mode", mode,
                     "--endpoint", self.endpoint, "--plane-url", plane_url,
                     "--node-id", node_id, "--node-address", "127.0.0.1"]
        if token:
            token_file = self.workdir / "token"
            token_file.write_text(token)
            token_file.chmod(0o600)
            self.args += ["--token-file", str(token_file)]
        self.proc = None

    def start(self, timeout: float = 30) -> "Plugin":
        env = {k: v for k, v in os.environ.items() if k not in ("STRATA_URL", "STRATA_TOKEN")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args, cwd=ROOT, stdout=log,
                                         stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"the CSI plugin did not listen: {self.log.read_text()}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(self.endpoint)

    def controller(self, channel):
        return csi_pb2_grpc.ControllerStub(channel)

    def identity(self, channel):
        return csi_pb2_grpc.IdentityStub(channel)

    def node(self, channel):
        return csi_pb2_grpc.NodeStub(channel)
