"""`strata up` end to end on embedded defaults (SQLite, its own redis-server), driven by the
`strata` CLI as a user would: health, file systems, a scrub job with a progress bar, Ctrl-C,
and a restart (as after a reboot) that finds the pool and its data again."""
import json
import re
import stat
import subprocess
from pathlib import Path

import pytest
import requests

from tests.appliance import Appliance
from tests.kit import wait_for

pytestmark = pytest.mark.root


@pytest.fixture
def appliance():
    app = Appliance()
    yield app
    app.destroy()


def children_of(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True,
                         text=True).stdout
    return [int(p) for p in out.split()]


def descendants_of(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        for child in children_of(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def listening_addresses(pids: set[int]) -> list[tuple[str, str]]:
    """(local address, process) of every TCP socket the processes listen on."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            found.append((fields[3], re.findall(r'"([^"]+)"', line)[0]))
    return found


def test_up_serves_cli_and_survives_restart(appliance):
    app = appliance.start()
    data_dir = app.data_dir
    try:
        creds_path = data_dir / "credentials.json"
        assert stat.S_IMODE(creds_path.stat().st_mode) == 0o600
        assert {"api_url", "username", "password", "token"} <= app.credentials.keys()
        assert (data_dir / "strata.sqlite3").exists()

        pools = json.loads(app.cli("--json", "pool", "list").stdout)
        assert [(p["name"], p["driver"], p["state"]) for p in pools] == [
            ("default", "local", "online")]

        # every daemon strata up started is in the health answer, with its address
        daemons = {name: d for s in json.loads(app.cli("health").stdout)["services"].values()
                   for name, d in s.items()}
        assert {"s3", "nfs", "smb", "iscsi", "nbd"} <= set(daemons), daemons
        assert all(daemons[n]["state"] == "ok" for n in ("s3", "nfs", "smb", "iscsi", "nbd"))
        assert daemons["s3"]["endpoint"].endswith(f":{app.s3_port}")
        # with the default --host 127.0.0.1, nothing of Strata listens beyond loopback
        listening = listening_addresses(descendants_of(app.proc.pid))
        assert {str(p) for p in (app.port, app.s3_port, app.nfs_port, app.smb_port,
                                 app.iscsi_port, app.nbd_port)} <= \
            {addr.rpartition(":")[2] for addr, _ in listening}, listening
        assert all(addr.startswith(("127.0.0.1:", "[::1]:", "[::ffff:127.0.0.1]:"))
                   for addr, _ in listening), listening

        # single host: this host is the one node of its cluster, up and heartbeating for
        # the daemons strata up supervises; the default pool is on its disks
        node = wait_for(lambda: json.loads(app.cli("--json", "node", "list").stdout), 20,
                        "the host's node up", interval=0.5,
                        until=lambda rows: rows and rows[0]["state"] == "up")
        assert len(node) == 1 and node[0]["local"]
        assert {"tgtd", "web", "worker"} <= set(node[0]["daemons"])
        assert pools[0]["node"] == node[0]["name"]

        r = app.cli("fs", "create", "ckpt", "--quota", "100M")
        assert r.returncode == 0, r.stderr
        fs = json.loads(app.cli("--json", "fs", "show", "ckpt").stdout)
        assert fs["quota_bytes"] == 100 << 20
        Path(fs["path"], "step-100").write_bytes(b"weights" * 1000)

        r = app.cli("fs", "create", "Bad Name")
        assert r.returncode == 1 and r.stderr.startswith("strata: ")
        assert len(r.stderr.strip().splitlines()) == 1

        r = app.cli("pool", "scrub", "default")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "100.0%" in r.stdout and "succeeded" in r.stdout

        # a snapshot schedule through the CLI, run three times, keeps the last two
        r = app.cli("schedule", "create", "often", "--fs", "ckpt", "--every", "60",
                    "--keep-last", "2")
        assert r.returncode == 0, r.stderr
        for _ in range(3):
            r = app.cli("schedule", "run", "often")
            assert r.returncode == 0 and "succeeded" in r.stdout, r.stdout + r.stderr
        snaps = json.loads(app.cli("--json", "snapshot", "list", "--filesystem", "ckpt").stdout)
        assert len(snaps) == 2 and all(s["name"].startswith("auto-often-") for s in snaps)
        # ... and is edited through the CLI: a cron replaces the interval; a bad one is refused
        r = app.cli("--json", "schedule", "update", "often", "--cron", "15 3 * * *",
                    "--keep-last", "1", "--disable")
        assert r.returncode == 0, r.stdout + r.stderr
        row = json.loads(app.cli("--json", "schedule", "show", "often").stdout)
        assert (row["cron"], row["every_minutes"], row["keep_last"], row["enabled"]) == \
            ("15 3 * * *", None, 1, False), row
        r = app.cli("schedule", "update", "often", "--cron", "61 * * * *")
        assert r.returncode == 1 and "cron" in r.stderr and len(r.stderr.splitlines()) == 1, \
            r.stderr
        assert json.loads(app.cli("--json", "schedule", "show", "often").stdout)["cron"] == \
            "15 3 * * *"

        # a failed sign-in is audited with the peer's address, whatever X-Forwarded-For says
        # (that header is the client's own word: it must not choose what sign-in limits count)
        with requests.Session() as web:
            page = web.get(f"{app.url}/login/", timeout=10)
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            web.post(f"{app.url}/login/", timeout=10, data={
                "csrfmiddlewaretoken": token, "username": "mallory", "password": "guess"},
                headers={"Referer": f"{app.url}/login/", "X-Forwarded-For": "10.9.9.9"})
        rows = requests.get(f"{app.url}/api/v1/audit/?username=mallory", timeout=10, headers={
            "Authorization": f"Token {app.credentials['token']}"}).json()["results"]
        denied = [r for r in rows if r["result"] == "denied"]
        assert denied and {r["remote_addr"] for r in denied} == {"127.0.0.1"}, rows
    finally:
        children = children_of(app.proc.pid)
        out = app.stop()
    assert app.proc.returncode == 0, out
    assert "Strata stopped." in out
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"

    # a clean stop leaves nothing of the data directory attached to the machine
    assert str(data_dir) not in Path("/proc/mounts").read_text()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(data_dir) not in loops, loops
    assert "pool default: released" in out
    # unmounted, the pool's mountpoint is a plain directory of the root disk: nothing can
    # write into it (it would vanish from view once the pool is mounted again)
    with pytest.raises(PermissionError):
        (data_dir / "pools" / "default" / "stray").write_bytes(b"lands on the root disk")
    app.start()  # attaches and mounts them again
    fs = json.loads(app.cli("--json", "fs", "show", "ckpt").stdout)
    assert Path(fs["path"], "step-100").read_bytes() == b"weights" * 1000
    assert json.loads(app.cli("--json", "pool", "show", "default").stdout)["state"] == "online"
