"""The config file the plane writes for the gateway, and the launcher `strata up` runs."""
from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys

from services.object import gatewayconf, up
from services.object.gateway.config import parse_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_rendered_config_is_what_the_gateway_accepts(tmp_path):
    cfg = gatewayconf.render_config(data_root=str(tmp_path / "data"), admin_token="t",
                                    users={"AK": {"secret_key": "s" * 20, "user": "alice", "admin": 0}})
    path = tmp_path / "gateway.json"
    with gatewayconf.locked(path):
        assert gatewayconf.write_config(path, cfg) is True
        assert gatewayconf.write_config(path, cfg) is False  # unchanged: not rewritten
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    parsed = parse_config(path.read_text())
    assert parsed["users"]["AK"] == {"secret_key": "s" * 20, "user": "alice", "admin": False}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_first_start_gets_a_valid_empty_config_and_no_stale_gate(tmp_path):
    gate = gatewayconf.gate_path(tmp_path)
    gate.parent.mkdir(parents=True)
    gate.write_text(json.dumps({"data_root": "/old"}))  # left by the previous run
    [spec] = up.daemons(tmp_path, {"s3_port": 9123, "host": "127.0.0.1"})
    config = parse_config(gatewayconf.config_path(tmp_path).read_text())
    assert config["users"] == {} and config["admin_token"] == ""
    assert not gate.exists() and not spec.ready()
    assert spec.argv[-4:] == ["--host", "127.0.0.1", "--port", "9123"]


def test_launcher_refuses_a_busy_port_with_a_message(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "services.object.serve", "--data-dir", str(tmp_path),
                               "--port", str(port)], cwd=REPO, capture_output=True, text=True, timeout=30,
                              check=False)
    assert done.returncode == 2 and "--s3-port" in done.stderr


def test_strata_up_options():
    import argparse

    parser = argparse.ArgumentParser()
    up.add_arguments(parser)
    opts = vars(parser.parse_args([]))
    assert opts["s3_port"] == 9000 and opts["s3_domains"] is None
    opts = vars(parser.parse_args(["--s3-port", "9100", "--s3-domain", "s3.lan", "--s3-domain", "s3.local"]))
    assert up.s3_address({**opts, "host": "0.0.0.0"}) == ("0.0.0.0", 9100)
    assert opts["s3_domains"] == ["s3.lan", "s3.local"]
    assert opts["s3_workers"] is None  # the gateway's default: the cores


def test_strata_up_passes_the_s3_worker_count_to_the_gateway(tmp_path):
    [spec] = up.daemons(tmp_path, {"s3_port": 9123, "host": "127.0.0.1", "s3_workers": 3})
    assert spec.argv[-2:] == ["--workers", "3"]
