"""`strata up` end to end on embedded defaults (SQLite, its own redis-server), driven by the
`strata` CLI as a user would: health, file systems, a scrub job with a progress bar, Ctrl-C,
and a restart that finds the pool and its data again."""
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

import dataplane

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parent.parent
STRATA = [sys.executable, "-m", "console.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def embedded_env(data_dir: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("STRATA_DATABASE_URL", "STRATA_REDIS_URL", "STRATA_DATA_DIR",
                        "STRATA_URL", "STRATA_TOKEN")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def start(data_dir: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        STRATA + ["--data-dir", str(data_dir), "up", "--port", str(port),
                  "--default-pool-size", "1G"],
        env=embedded_env(data_dir), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=5) as r:
                health = json.load(r)
            if health["components"]["worker"]["state"] == "ok":
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"strata up exited: {proc.stdout.read()}")
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("strata up did not become healthy in 120 s")


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    return out


def cli(data_dir: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(STRATA + ["--data-dir", str(data_dir), *args],
                          env=embedded_env(data_dir), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


@pytest.fixture
def data_dir():
    path = Path(tempfile.mkdtemp(prefix="strata-test-"))
    yield path
    for kind in ("local", "directory"):
        drv = dataplane.open_driver(kind, path)
        for name in drv.list_pools():
            try:
                drv.deactivate_pool(name)
            except Exception:
                pass
    subprocess.run(["rm", "-rf", str(path)])


def test_up_serves_cli_and_survives_restart(data_dir):
    port = free_port()
    proc = start(data_dir, port)
    try:
        creds_path = data_dir / "credentials.json"
        assert stat.S_IMODE(creds_path.stat().st_mode) == 0o600
        creds = json.loads(creds_path.read_text())
        assert {"api_url", "username", "password", "token"} <= creds.keys()
        assert (data_dir / "strata.sqlite3").exists()

        pools = json.loads(cli(data_dir, "--json", "pool", "list").stdout)
        assert [(p["name"], p["driver"], p["state"]) for p in pools] == [
            ("default", "local", "online")]

        r = cli(data_dir, "fs", "create", "ckpt", "--quota", "100M")
        assert r.returncode == 0, r.stderr
        fs = json.loads(cli(data_dir, "--json", "fs", "show", "ckpt").stdout)
        Path(fs["path"], "step-100").write_bytes(b"weights" * 1000)

        r = cli(data_dir, "fs", "create", "Bad Name")
        assert r.returncode == 1 and r.stderr.startswith("strata: ")
        assert len(r.stderr.strip().splitlines()) == 1

        r = cli(data_dir, "pool", "scrub", "default")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "100.0%" in r.stdout and "succeeded" in r.stdout
    finally:
        children = children_of(proc.pid)
        out = stop(proc)
    assert proc.returncode == 0, out
    assert "Strata stopped." in out
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"

    # as after a reboot: the pool is not mounted and its loop devices are gone
    dataplane.open_driver("local", data_dir).deactivate_pool("default")
    proc = start(data_dir, port)
    try:
        fs = json.loads(cli(data_dir, "--json", "fs", "show", "ckpt").stdout)
        assert Path(fs["path"], "step-100").read_bytes() == b"weights" * 1000
        assert json.loads(cli(data_dir, "--json", "pool", "show", "default").stdout)[
            "state"] == "online"
    finally:
        stop(proc)
