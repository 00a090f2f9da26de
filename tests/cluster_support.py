"""A cluster on this machine for tests: a plane (`strata plane`) on its own PostgreSQL
database and role (with a password, allowed to make the nodes' roles) and a Redis user with a
password, and node agents (`strata node run`) as real processes, each with its own data
directory and a 127.0.0.x address. Everything made is removed by :meth:`Cluster.destroy`,
also after a failure."""
import json
import os
import secrets
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from tests import cleanup_leftovers
from tests.appliance import ROOT, STRATA, embedded_env
from tests.kit import free_port, wait_for

PG = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-qAt"]
REDIS_DB = os.environ.get("STRATA_CLUSTER_TEST_REDIS_DB", "3")


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
        subprocess.run(["redis-cli", "ACL", "SETUSER", self.redis_user, "on",
                        f">{self.redis_password}", "~*", "&*", "+@all"], check=True,
                       capture_output=True)
        return self

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

    def kill_node(self, name: str) -> None:
        """Node ``name`` dies: its agent and every daemon it reported, kill -9."""
        daemons = self.node(name)["daemons"]
        agent = self.agents.pop(name)
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait()
        for d in daemons.values():
            if d.get("pid"):
                try:
                    os.kill(d["pid"], signal.SIGKILL)
                except ProcessLookupError:
                    pass

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
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)
