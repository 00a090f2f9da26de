"""Start and stop a whole appliance (`strata up`) on embedded defaults for end-to-end tests."""
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tests import cleanup_leftovers
from tests.kit import free_port

ROOT = Path(__file__).resolve().parent.parent
STRATA = [sys.executable, "-m", "console.cli.main"]


def embedded_env() -> dict:
    """The environment of a user's machine: no external database or Redis."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("STRATA_DATABASE_URL", "STRATA_REDIS_URL", "STRATA_DATA_DIR",
                        "STRATA_URL", "STRATA_TOKEN")}
    env["PYTHONPATH"] = str(ROOT)
    return env


class Appliance:
    """One `strata up` process with its own data directory and port."""

    def __init__(self, data_dir: Path | None = None, port: int | None = None,
                 s3_port: int | None = None, nfs_port: int | None = None,
                 smb_port: int | None = None, pool_size: str = "1G", tls: bool = False,
                 extra_args: tuple = ()):
        self.pool_size, self.tls, self.extra_args = pool_size, tls, list(extra_args)
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="strata-test-"))
        self.port = port or free_port()
        self.s3_port = s3_port or free_port()  # 9000 may be taken on a shared machine
        self.nfs_port = nfs_port or free_port()  # 2049 and 445 may be taken too
        self.smb_port = smb_port or free_port()
        self.iscsi_port, self.nbd_port = free_port(), free_port()  # 3260, 10809 may be taken
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.proc = None

    def start(self, timeout=120) -> "Appliance":
        self.proc = subprocess.Popen(
            STRATA + ["--data-dir", str(self.data_dir), "up", "--port", str(self.port),
                      "--default-pool-size", self.pool_size, "--s3-port", str(self.s3_port),
                      "--nfs-port", str(self.nfs_port), "--smb-port", str(self.smb_port),
                      "--iscsi-port", str(self.iscsi_port), "--nbd-port", str(self.nbd_port),
                      *(["--tls"] if self.tls else []), *self.extra_args],
            env=embedded_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/health", timeout=5,
                                            context=self.ssl_context()) as r:
                    if json.load(r)["components"]["worker"]["state"] == "ok":
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise AssertionError(f"strata up exited: {self.proc.stdout.read()}")
            time.sleep(0.2)
        out = self._shutdown()
        raise AssertionError(f"strata up did not become healthy in {timeout} s; it printed:\n"
                             f"{out[-4000:]}")

    @property
    def tls_cert(self) -> Path:
        """The certificate `strata up --tls` made at its first start."""
        return self.data_dir / "tls" / "cert.pem"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context trusting the appliance's certificate (None without TLS); raises
        OSError until the certificate exists."""
        return ssl.create_default_context(cafile=str(self.tls_cert)) if self.tls else None

    def _shutdown(self) -> str:
        """Ctrl-C and wait; kill only if it does not stop (its daemons stop with it)."""
        try:
            return self.stop()
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.communicate()[0] or ""

    def stop(self) -> str:
        """Ctrl-C, as a user would; returns what `strata up` printed."""
        self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=90)
        return out

    @property
    def credentials(self) -> dict:
        return json.loads((self.data_dir / "credentials.json").read_text())

    def cli(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run(STRATA + ["--data-dir", str(self.data_dir), *args],
                              env=embedded_env(), cwd=ROOT, capture_output=True, text=True,
                              timeout=120)

    def destroy(self) -> None:
        """Stop if running, unmount its pools, detach their loops, remove the data."""
        if self.proc and self.proc.poll() is None:
            self._shutdown()
        cleanup_leftovers.release_data_dir(self.data_dir)
