"""The tests' one kit: free ports, waiting for a port, a condition (`wait_for`, which returns
what the condition returned) or a Job (`wait_job`; `run_job` starts one and waits), and a
Strata S3 gateway subprocess. A whole appliance (`strata up`) is tests/appliance.py's `Appliance`.

Standard library only at import (tests/run_suite.py imports it before pytest and Django)."""
from __future__ import annotations

import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB_DONE = ("succeeded", "failed", "cancelled")

_HANDED_OUT: set = set()


def xdist_worker() -> tuple[int, int]:
    """(this pytest-xdist worker's index, the number of workers): (0, 1) without xdist."""
    return (int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")),
            int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on ``host`` below the kernel's ephemeral range: a port from bind(0)
    comes from that range, so an outgoing connection could take it before the server that
    was given it listens. Never the same port twice in one test run: several servers'
    ports are often picked before any of them listens, so a free port could otherwise be
    picked again (seen: two appliances of one test given the same S3 port). Each pytest-xdist
    worker picks from a slice of the range of its own."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
        low = int(fh.read().split()[0])
    start = max(1024, low - 12000)
    index, workers = xdist_worker()
    width = (low - start) // workers
    start += index * width
    for _ in range(200):
        port = random.randrange(start, start + width)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


def port_answers(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    """True when something accepts a TCP connection on host:port now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port(port: int, timeout: float = 30.0, host: str = "127.0.0.1", proc=None,
              what: str = "server", interval: float = 0.05) -> None:
    """Return once host:port accepts connections; RuntimeError when ``proc`` (the server's
    Popen, if given) exits first, TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening "
                               f"on port {port}")
        if port_answers(port, host):
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} did not listen on port {port} within {timeout} s")
        time.sleep(interval)


def wait_for(predicate, timeout: float = 60, what: str = "condition", interval: float = 0.1,
             ignore: tuple = (), until=bool):
    """Poll ``predicate()`` until ``until(value)`` holds (by default: until it returns
    something true); return that value.

    An exception of a type in ``ignore`` counts as "not yet" (a server still starting, an
    object not yet restored); any other propagates at once, so a predicate may assert that
    what it waits on is still alive. After ``timeout`` seconds: AssertionError naming
    ``what`` and the last value (or ignored error) seen."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            last = predicate()
        except ignore as exc:
            last = exc
        else:
            if until(last):
                return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} "
                                 f"(last: {repr(last)[:500]})")
        time.sleep(interval)


def run_job(api, url: str, body: dict | None = None, timeout: float = 90, **wait) -> dict:
    """POST ``body`` (JSON) to ``url``, an endpoint that answers 202 with a Job, with ``api``
    (the DRF test client); wait for the Job (``wait``: more of :func:`wait_job`'s options)
    and return its final JSON."""
    r = api.post(url, body or {}, format="json")
    assert r.status_code == 202, r.json()
    return wait_job(api, r.json()["id"], timeout, **wait)


def wait_job(api, job, timeout: float = 90, *, token: str | None = None,
             interval: float = 0.2, during=None, progress: list | None = None) -> dict:
    """Poll a plane Job until it finishes (succeeded, failed or cancelled); return its JSON.

    ``api`` is a client with ``get(url).json()`` (the DRF test client, a requests Session)
    or, for plain HTTP, the plane's base URL (``http://host:port``), with ``token`` for its
    Authorization header. ``job`` is a Job id or the Job's URL (absolute or a path).
    ``during()`` is called between polls; each poll's ``progress`` is appended to the list
    ``progress`` when one is given."""
    url = f"/api/v1/jobs/{job}/" if isinstance(job, int) else job
    if isinstance(api, str):
        base = api.rstrip("/")
        if url.startswith("/"):
            url = base + url
        get = _http_get(token)
    else:
        def get(u):
            return api.get(u).json()
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = get(url)
        if progress is not None:
            progress.append(state.get("progress"))
        if state["state"] in JOB_DONE:
            return state
        if during:
            during()
        time.sleep(interval)
    raise AssertionError(f"job {job} did not finish in {timeout} s: {state}")


def _http_get(token):
    headers = {"Authorization": f"Token {token}"} if token else {}

    def get(url):
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=30) as r:
            return json.load(r)
    return get


def children(pid: int) -> list[int]:
    """PIDs of the processes whose parent is ``pid``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(name))
    return sorted(out)


def _alive(pid: int) -> bool:
    """False once ``pid`` has exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Gateway:
    """A Strata S3 gateway subprocess (``python -m services.object.gateway``) on a free port,
    its config in ``workdir``/gateway.json and its log in ``workdir``/gateway.log.
    ``users`` maps access keys to ``{"secret_key", "user", "admin"}``; further ``settings``
    go into the config as they are. ``stop`` then ``start`` keeps its data; ``kill9``
    simulates a crash; ``env`` is extra environment for the next start. ``workers``: its
    ``--workers`` (default ``STRATA_TEST_S3_WORKERS``, else 1: one process, as the tests
    that do not ask were written for). ``nofile``: its file descriptor limit (soft and hard),
    to run it as on a host with a small one. ``tls``: (certificate, key) files: it serves
    HTTPS only, and ``endpoint`` says so. ``index_shards``: of each new bucket (default 2, so
    that every test goes through the merge of several shards, as on a gateway of 4 or more
    workers; None: the gateway's own default, one per two workers)."""

    def __init__(self, workdir, users: dict, *, data_root: str | None = None,
                 admin_token: str = "", workers: int | None = None, nofile: int | None = None,
                 tls: tuple[str, str] | None = None, index_shards: int | None = 2, **settings):
        self.workdir = str(workdir)
        self.config_path = os.path.join(self.workdir, "gateway.json")
        self.data_root = data_root or os.path.join(self.workdir, "data")
        self.admin_token = admin_token
        self.port = free_port()
        self.endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.tls = tls
        self.proc = None
        self.settings = settings if index_shards is None else {"index_shards": index_shards, **settings}
        self.workers = workers or int(os.environ.get("STRATA_TEST_S3_WORKERS") or 1)
        self.env: dict[str, str] = {}
        self.nofile = nofile
        self.write_config(users)

    def write_config(self, users: dict) -> None:
        cfg = {"data_root": self.data_root, "region": "us-east-1",
               "admin_token": self.admin_token, "users": users, **self.settings}
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(cfg, fh)
        os.replace(tmp, self.config_path)

    def start(self, timeout: float = 20) -> "Gateway":
        log_path = os.path.join(self.workdir, "gateway.log")
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.object.gateway", "--config", self.config_path,
                 "--host", "127.0.0.1", "--port", str(self.port), "--workers", str(self.workers),
                 *(["--ssl-certfile", self.tls[0], "--ssl-keyfile", self.tls[1]] if self.tls else [])],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                preexec_fn=self._limit_files if self.nofile else None)
        try:
            wait_port(self.port, timeout, proc=self.proc, what=f"S3 gateway (see {log_path})")
        except BaseException:
            self.stop()
            raise
        return self

    def _limit_files(self) -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def worker_pids(self) -> list[int]:
        """PIDs of its worker processes (none when it serves alone, ``workers=1``)."""
        return children(self.proc.pid) if self.proc is not None else []

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            workers = self.worker_pids()
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            # its workers die with it (SIGKILL from the kernel), and the port they shared closes
            # a moment later: until then a new start would find the old port answering
            deadline = time.monotonic() + 10
            while any(_alive(pid) for pid in workers) or (workers and port_answers(self.port)):
                if time.monotonic() > deadline:
                    raise AssertionError(f"workers {workers} of the killed gateway still hold port {self.port}")
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()
