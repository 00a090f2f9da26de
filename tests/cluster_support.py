"""A cluster on this machine for tests: a plane (`strata plane`) on its own PostgreSQL
database and role (with a password, allowed to make the nodes' roles) and a Redis user with a
password, and node agents (`strata node run`) as real processes, each with its own data
directory and a 127.0.0.x address. Everything made is removed by :meth:`Cluster.destroy`,
also after a failure.

:func:`ceph_nodes` is the whole fixture of the modules with process nodes serving a Ceph pool
of the session's cluster (tests/ceph.py); :func:`join_node` joins a node in a Django test (no
process) and gives its API client."""
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import requests

from tests import cleanup_leftovers
from tests.appliance import ROOT, STRATA, embedded_env
from tests.kit import free_port, wait_for

PG = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-qAt"]
REDIS_DB = os.environ.get("STRATA_CLUSTER_TEST_REDIS_DB", "3")
# the modules on the session's Ceph cluster (which may run beside test_cluster.py)
CEPH_REDIS_DB = os.environ.get("STRATA_CLUSTER_CEPH_TEST_REDIS_DB", "4")


def psql(sql: str, database: str = "postgres") -> str:
    return subprocess.run(PG + ["-d", database, "-c", sql], check=True, capture_output=True,
                          text=True).stdout.strip()


class Cluster:
    def __init__(self, redis_db: str = REDIS_DB):
        self.tag = f"strata_cluster_{os.getpid()}_{secrets.token_hex(3)}"
        self.dir = Path(tempfile.mkdtemp(prefix="strata-test-cluster-"))
        self.pg_password, self.redis_password = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        self.redis_user = self.tag.replace("_", "-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.redis_db = str(redis_db)
        self.plane = None
        self.agents: dict[str, subprocess.Popen] = {}
        self.database_url = (f"postgres://{self.tag}:{self.pg_password}@127.0.0.1:5432/"
                             f"{self.tag}")
        self.redis_url = (f"redis://{self.redis_user}:{self.redis_password}@127.0.0.1:6379/"
                          f"{redis_db}")

    # --- the plane -------------------------------------------------------------------------

    def create(self) -> "Cluster":
        psql(f"CREATE ROLE {self.tag} LOGIN CREATEROLE PASSWORD '{self.pg_password}'")
        psql(f"CREATE DATABASE {self.tag} OWNER {self.tag}")
        self._flush_redis()
        subprocess.run(["redis-cli", "ACL", "SETUSER", self.redis_user, "on",
                        f">{self.redis_password}", "~*", "&*", "+@all"], check=True,
                       capture_output=True)
        return self

    def _flush_redis(self) -> None:
        """The Redis database is the tests' own, and every module's nodes have the same
        names: a plane stopped with a task pending (a retry's countdown) puts it back on the
        queue, one killed leaves it unacknowledged for Celery to hand back five minutes
        later, and the next module's plane would run it against its own nodes (a grace
        started for a node that serves) or claim its own job row of that id. Emptied before
        a plane starts and after."""
        subprocess.run(["redis-cli", "-n", self.redis_db, "FLUSHDB"], check=True,
                       capture_output=True)

    def env(self) -> dict:
        return {**embedded_env(), "STRATA_DATABASE_URL": self.database_url,
                "STRATA_REDIS_URL": self.redis_url, "STRATA_NODE_NAME": "plane-host"}

    def start_plane(self, timeout: float = 180, args: tuple = ()) -> None:
        log = open(self.dir / "plane.out", "a")
        self.plane = subprocess.Popen(
            STRATA + ["--data-dir", str(self.dir / "plane"), "plane", "--port", str(self.port),
                      *args],
            env=self.env(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

        def healthy():
            assert self.plane.poll() is None, (self.dir / "plane.out").read_text()[-3000:]
            return requests.get(f"{self.url}/api/v1/health", timeout=5).json()[
                "components"]["worker"]["state"] == "ok"

        wait_for(healthy, timeout, "the plane's worker", interval=0.5,
                 ignore=(requests.RequestException, ValueError, KeyError))

    def stop_plane(self) -> None:
        if self.plane and self.plane.poll() is None:
            self.plane.send_signal(signal.SIGINT)
            try:
                self.plane.wait(90)
            except subprocess.TimeoutExpired:
                self.plane.kill()
                self.plane.wait()

    @property
    def token(self) -> str:
        return json.loads((self.dir / "plane" / "credentials.json").read_text())["token"]

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("headers", {"Authorization": f"Token {self.token}"})
        return requests.request(method, f"{self.url}/api/v1/{path}", timeout=30, **kwargs)

    def cli(self, *args) -> subprocess.CompletedProcess:
        return subprocess.run(STRATA + ["--data-dir", str(self.dir / "plane"), *args],
                              env=embedded_env(), cwd=ROOT, capture_output=True, text=True,
                              timeout=60)

    # --- nodes -----------------------------------------------------------------------------

    def config(self, name: str) -> Path:
        return self.dir / name / "node.json"

    def join(self, name: str, address: str, token: str | None = None):
        token = token or self.cli("node", "token", "create").stdout.strip().splitlines()[-1]
        return self.cli("node", "join", "--plane", self.url, "--token", token, "--name", name,
                        "--management-address", address, "--data-address", address,
                        "--config", str(self.config(name)))

    def add_nodes(self, addresses: dict[str, str], timeout: float = 60) -> None:
        """Nodes joined with these addresses (name: address), their agents started; returns
        once every one is up."""
        for name, address in addresses.items():
            joined = self.join(name, address)
            assert joined.returncode == 0, joined.stderr
            self.run_agent(name)
        for name in addresses:
            self.wait_state(name, "up", timeout=timeout)

    def agent_data(self, name: str) -> Path:
        return self.dir / name / "data"

    def run_agent(self, name: str) -> subprocess.Popen:
        log = open(self.dir / f"{name}.out", "a")
        self.agents[name] = subprocess.Popen(
            STRATA + ["node", "run", "--config", str(self.config(name)), "--data-dir",
                      str(self.dir / name / "data")],
            env=embedded_env(), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        return self.agents[name]

    def node(self, name: str) -> dict:
        return self.api("GET", f"nodes/{name}/").json()

    def wait_daemon(self, name: str, daemon: str, timeout: float = 180) -> dict:
        """Wait until node ``name`` reports its ``daemon`` running; its daemons."""
        return wait_for(lambda: self.node(name)["daemons"], timeout,
                        f"{name}'s {daemon} running", interval=0.5,
                        until=lambda d: (d.get(daemon) or {}).get("state") == "running")

    def wait_state(self, name: str, state: str, timeout: float = 30) -> dict:
        return wait_for(lambda: self.node(name), timeout, f"node {name} {state}",
                        interval=0.25, until=lambda n: n.get("state") == state)

    def stop_agent(self, name: str) -> None:
        proc = self.agents.pop(name, None)
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def signal_node(self, name: str, sig: int, pids: list[int] | None = None) -> list[int]:
        """Send ``sig`` to node ``name``'s agent and every daemon it reported (or to
        ``pids``); the PIDs signalled."""
        if pids is None:
            pids = [self.agents[name].pid, *(d["pid"] for d in self.node(name)["daemons"]
                                             .values() if d.get("pid"))]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def kill_node(self, name: str) -> None:
        """Node ``name`` dies: its agent and every daemon it reported, kill -9."""
        self.signal_node(name, signal.SIGKILL)
        self.agents.pop(name).wait()

    def take_over(self, survivor: str, owner: str) -> str:
        """What keepalived's ``notify_master`` runs on ``survivor`` when it takes ``owner``'s
        floating address over (:mod:`services.file.takeover`: NFS grace for ``owner``'s
        clients at once), for process nodes, which run no keepalived; its line of output."""
        done = subprocess.run([STRATA[0], "-m", "services.file.takeover",
                               str(self.agent_data(survivor)), owner], env=embedded_env(),
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    def plane_log(self) -> str:
        """What the plane's processes logged (every file of its log folder)."""
        return "".join(log.read_text() for log in sorted((self.dir / "plane" / "log")
                                                         .glob("*.log")))

    def plane_logged(self, text: str) -> bool:
        """Whether the plane's log says ``text``."""
        return text in self.plane_log()

    def failure_context(self, lines: int = 40) -> str:
        """For a failed test's report (conftest.py): the plane's log without the worker's
        routine lines, and each agent's output, their last ``lines`` lines each."""
        routine = re.compile(r"Task \S+\[[0-9a-f-]+\] (received|succeeded)")
        plane = [line for line in self.plane_log().splitlines() if not routine.search(line)]
        parts = [("plane", plane[-lines:])]
        for out in sorted(self.dir.glob("*.out")):
            parts.append((out.stem, out.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(f"--- {name} ---\n" + "\n".join(text) for name, text in parts)

    def keep_logs(self, keep: Path) -> None:
        """Copy the plane's and agents' logs into ``keep`` (before :meth:`destroy`)."""
        for log in [*self.dir.glob("*.out"), *self.dir.glob("*/log/*.log")]:
            shutil.copy(log, keep / f"{log.parent.parent.name}-{log.name}")

    # --- clean-up --------------------------------------------------------------------------

    def destroy(self) -> None:
        for name in list(self.agents):
            self.stop_agent(name)
        self.stop_plane()
        for path in [self.dir / "plane", *self.dir.glob("*/data")]:
            if path.is_dir():
                cleanup_leftovers.release_data_dir(path)
        time.sleep(0.5)
        psql(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{self.tag}'")
        psql(f"DROP DATABASE IF EXISTS {self.tag}")
        for role in psql(f"SELECT rolname FROM pg_roles WHERE rolname LIKE '{self.tag}%'").split():
            psql(f'DROP ROLE IF EXISTS "{role}"')
        subprocess.run(["redis-cli", "ACL", "DELUSER", self.redis_user], capture_output=True)
        self._flush_redis()
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)


@contextmanager
def ceph_nodes(ceph_cluster, addresses: dict[str, str], service: str, *,
               filesystem: str | None = None, pool_options: dict | None = None,
               grace: int = 10, keep_logs: Path | None = None, up_timeout: float = 60):
    """A plane with a Ceph pool of ``ceph_cluster`` (``c.pool``; by ``pool_options`` replicated:3,
    one copy a host), file system ``filesystem`` on it when given, and node agents at
    ``addresses`` (``c.addresses``) assigned ``service`` on ports of their own (``c.ports``):

    - ``"file"``: Ganesha (and smbd), NFS grace and lease ``grace`` seconds (short: a node that
      starts or takes over begins in grace); yields once every node's Ganesha runs;
    - ``"object"``: the S3 gateway (one worker); the plane keeps the buckets in the pool's
      RADOS pool (``--s3-store rados``); a gateway serves once the plane's config reached it.

    After: NFS exports, file systems and the pool deleted through the API (the RADOS pools go
    from the session's cluster), logs copied to ``keep_logs``, the cluster destroyed."""
    from tests.ceph import ceph_pool_body    # pytest's: bench/cluster_idle.py imports this module

    c = Cluster(redis_db=CEPH_REDIS_DB).create()
    c.pool = f"{service[:3]}-{uuid.uuid4().hex[:6]}"
    c.addresses, c.ports = dict(addresses), {}
    try:
        c.start_plane(args=("--s3-store", "rados", "--s3-pool", c.pool)
                      if service == "object" else ())
        made = c.api("POST", "pools/", json=ceph_pool_body(
            ceph_cluster, c.pool, **({"redundancy": "replicated:3", "failure_domain": "host"}
                                     if pool_options is None else pool_options)))
        assert made.status_code == 201, made.text
        if filesystem:
            made = c.api("POST", "filesystems/", json={"name": filesystem, "pool": c.pool})
            assert made.status_code == 201, made.text
        c.add_nodes(addresses, timeout=up_timeout)
        for name in addresses:
            c.ports[name] = free_port()
            options = ({"nfs_port": c.ports[name], "smb_port": free_port(),
                        "nfs_grace_seconds": grace, "nfs_lease_seconds": grace}
                       if service == "file" else {"s3_port": c.ports[name], "s3_workers": 1})
            done = c.api("PATCH", f"nodes/{name}/", json={"services": [service],
                                                          "options": options})
            assert done.status_code == 200, done.text
        if service == "file":
            for name in addresses:
                c.wait_daemon(name, "ganesha")
        yield c
    finally:
        try:
            for export in c.api("GET", "nfs-exports/").json().get("results", []):
                c.api("DELETE", f"nfs-exports/{export['id']}/")
            for fs in c.api("GET", "filesystems/").json().get("results", []):
                c.api("DELETE", f"filesystems/{fs['name']}/")
            c.api("DELETE", f"pools/{c.pool}/")
        except Exception as exc:      # the plane may be gone: its cluster is deleted anyway
            print(f"clean-up through the API: {exc}")
        if keep_logs:
            c.keep_logs(keep_logs)
        c.destroy()


def join_node(name: str, address: str):
    """Node ``name`` joined to the plane of a Django test (no agent process): an API client
    with the node's credential."""
    from rest_framework.test import APIClient

    from services.nodes import cluster

    key, _ = cluster.create_join_token()
    _node, answer = cluster.join(key, name, address, address)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {answer['credential']}")
    return client
