"""`strata up --spdk on`: nvmf_tgt as a supervised daemon of the appliance. An spdk pool, a
volume and an NVMe-oF export to a host with a DH-HMAC-CHAP key made through the REST API;
SPDK's user-space initiator (spdk_dd) writes to it in a loop while nvmf_tgt is killed with
SIGKILL; `strata up` starts it again, the block service puts the pool, the subsystem and the
key back, and every write spdk_dd was told had succeeded reads back. The health answer lists
nvmf_tgt with its restart."""
from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess

import pytest

from tests.appliance import Appliance
from tests.kit import free_port, wait_for
from dataplane.spdk.dhchap import generate_dhchap_key
from tests.spdk_support import attach_config, key_file, spdk_dd, spdk_unavailable
from tests.test_daemon_restarts import (Load, assert_restarted_once, created, health,
                                        kill9_while, recorded, rest)

pytestmark = pytest.mark.root

MiB = 1 << 20
HOST = "nqn.2014-08.org.nvmexpress:uuid:0d0e0f00-1111-2222-3333-444455556666"
STRANGER = "nqn.2014-08.org.nvmexpress:uuid:99999999-8888-7777-6666-555555555555"


def pattern(i: int) -> bytes:
    return hashlib.sha256(f"block {i}".encode()).digest() * (MiB // 32)


@pytest.fixture(scope="module")
def app():
    why = spdk_unavailable()
    if why:
        pytest.skip(why)
    appliance = Appliance(pool_size="1G", extra_args=("--spdk", "on",
                                                      "--nvmf-port", str(free_port())))
    try:
        yield appliance.start(timeout=300)  # a bound: a loaded machine starts slowly
    finally:
        if appliance.proc and appliance.proc.poll() is None:
            with contextlib.suppress(Exception):
                appliance.stop()
        appliance.destroy()


def test_nvmf_tgt_killed_under_writes_comes_back_with_its_exports_and_data(app, tmp_path):
    created(app, "pools/", {"name": "fast", "driver": "spdk", "devices": ["image:256M"]})
    created(app, "volumes/", {"name": "db", "pool": "fast", "size_bytes": 64 * MiB})
    status, body = rest(app, "POST", "hosts/", {"name": "db-host", "nqn": HOST,
                                                "dhchap_key": "DHHC-1:00:bm90IGEga2V5:"})
    assert status == 400 and "dhchap_key" in body["fields"], body
    secret = generate_dhchap_key()
    host = created(app, "hosts/", {"name": "db-host", "nqn": HOST, "dhchap_key": secret})
    assert "dhchap_key" not in host and secret not in str(host)
    created(app, "host-groups/", {"name": "dbs", "hosts": ["db-host"]})
    exp = created(app, "block-exports/", {"volume": "db", "protocol": "nvmf",
                                          "host_group": "dbs"})
    assert exp["state"] == "online" and exp["trtype"] == "tcp", exp
    status, recipe = rest(app, "GET", f"block-exports/{exp['id']}/attach/")
    assert status == 200, recipe
    connect = recipe["setup"][-1]
    assert connect.startswith("nvme connect -t tcp") and exp["subsystem_nqn"] in connect
    assert "--dhchap-secret=" in connect and secret not in str(recipe), connect
    key = key_file(tmp_path / "host.key", secret)
    config = attach_config(exp["traddr"], exp["trsvcid"], exp["subsystem_nqn"], HOST,
                           dhchap_key_file=key)
    daemon = health(app)["daemons"]["nvmf_tgt"]
    assert daemon["state"] == "running", daemon
    # whoever reaches its RPC socket drives the target: root's alone, in root's run dir
    sock = app.data_dir / "run" / "spdk" / "spdk.sock"
    assert sock.stat().st_mode & 0o777 == 0o600 and (app.data_dir / "run").stat().st_mode & 0o777 == 0o700

    def write(i):
        src = tmp_path / f"w{i}"
        src.write_bytes(pattern(i))
        done = spdk_dd([f"--if={src}", "--ob=remoten1", f"--bs={MiB}", f"--seek={i}"],
                       config, tmp_path / "dd")
        assert done.returncode == 0, done.stdout[-500:]

    with Load(write, limit=48, pause=0.0) as load:
        kill9_while(app, "nvmf_tgt", load)
        load.wait_acked(min(len(load.acked) + 2, 48))
    assert load.acked, load.errors
    for i in load.acked:
        out = tmp_path / f"r{i}"
        done = spdk_dd(["--ib=remoten1", f"--of={out}", f"--bs={MiB}", f"--skip={i}",
                        "--count=1"], config, tmp_path / "dd")
        assert done.returncode == 0, done.stdout[-500:]
        assert out.read_bytes() == pattern(i), i
    assert_restarted_once(app, "nvmf_tgt")

    # the allow list and the key came back too: a host outside the group is refused, and
    # the host itself without its key
    for who in (attach_config(exp["traddr"], exp["trsvcid"], exp["subsystem_nqn"], STRANGER),
                attach_config(exp["traddr"], exp["trsvcid"], exp["subsystem_nqn"], HOST)):
        done = spdk_dd(["--ib=remoten1", f"--of={tmp_path / 'x'}", f"--bs={MiB}", "--count=1"],
                       who, tmp_path / "dd")
        assert done.returncode != 0, done.stdout[-500:]


def test_stop_leaves_no_target_behind(app):
    pid = recorded(app)["nvmf_tgt"]["pid"]
    out = app.stop()
    assert app.proc.returncode == 0, out[-3000:]
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 30, "nvmf_tgt gone")
    assert not os.path.exists(f"/var/run/dpdk/spdk_pid{pid}")
    left = subprocess.run(["pgrep", "-f", str(app.data_dir / "run" / "spdk")],
                          capture_output=True, text=True).stdout.split()
    assert left == [], left
