"""A Strata S3 gateway subprocess for backup tests (services/object/gateway), on a free
port with its data in a temporary directory; stopped by PID."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
ACCESS, SECRET = "BACKUPKEY", "backup-secret-key"


class S3Gateway:
    """``start()`` the gateway; ``endpoint``, ``client()``; ``stop()`` in a finally."""

    def __init__(self, workdir: str):
        from services.protection.tests.helpers import free_port
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.config = os.path.join(workdir, "gateway.json")
        with open(self.config, "w") as fh:
            json.dump({"data_root": os.path.join(workdir, "s3"), "region": "us-east-1",
                       "admin_token": "", "users": {
                           ACCESS: {"secret_key": SECRET, "user": "backup", "admin": True}}},
                      fh)
        self.proc = None

    def start(self) -> "S3Gateway":
        log = open(os.path.join(self.workdir, "gateway.log"), "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.object.gateway", "--config", self.config,
             "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"S3 gateway exited: see {self.workdir}/gateway.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("S3 gateway did not listen within 20 s")

    def client(self):
        from services.protection.objstore import s3_client
        return s3_client(self.endpoint, ACCESS, SECRET)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
