"""The config file the plane writes for the gateway, and the launcher `strata up` runs."""
from __future__ import annotations

import base64
import json
import os
import socket
import stat
import subprocess
import sys

import pytest

from services.object import gatewayconf, up
from services.object.gateway.config import ConfigError, parse_config
from services.object.gateway.errors import S3Error
from services.object.gateway.sse import Keyring

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


def test_kms_keys_in_the_config(tmp_path):
    """The plane's KMS keys reach the gateway's keyring (material, state, alias); a malformed
    ``kms_keys`` is refused as a whole, so the gateway keeps its previous config."""
    material = base64.b64encode(b"k" * 32).decode()
    cfg = gatewayconf.render_config(data_root=str(tmp_path), admin_token="t", users={}, kms_keys={
        "11111111-2222-3333-4444-555555555555": {"material": material, "enabled": True,
                                                 "aliases": ["alias/ckpt"], "arn": "arn:aws:kms:x:0:key/1"},
        "66666666-2222-3333-4444-555555555555": {"material": material, "enabled": False, "aliases": [],
                                                 "arn": "arn:aws:kms:x:0:key/6"}})
    ring = Keyring(parse_config(json.dumps(cfg)))
    assert ring.kms_id("alias/ckpt") == ring.kms_id("arn:aws:kms:us-east-1:0:alias/ckpt") == \
        "11111111-2222-3333-4444-555555555555"
    ring.kms_kek("11111111-2222-3333-4444-555555555555")
    with pytest.raises(S3Error) as e:
        ring.kms_kek("66666666-2222-3333-4444-555555555555")
    assert e.value.code == "KMS.DisabledException" and "arn:aws:kms:x:0:key/6" in e.value.message
    with pytest.raises(S3Error) as e:
        ring.kms_id("alias/other")
    assert e.value.code == "KMS.NotFoundException"
    for bad in ({"id": "not a spec"}, "id", [1]):
        with pytest.raises(ConfigError):
            parse_config(json.dumps({**cfg, "kms_keys": bad}))


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


def test_gateway_refuses_a_bad_commit_gather_with_one_line(tmp_path):
    """``commit_gather_ms`` (how long a group commit may wait for more requests) must be a
    number of milliseconds from 0 to 100: anything else stops the gateway before it listens,
    with a message naming the field."""
    cfg = tmp_path / "gateway.json"
    for bad in ("5", -1, 1000, True):
        cfg.write_text(json.dumps({"data_root": str(tmp_path / "data"), "commit_gather_ms": bad}))
        done = subprocess.run([sys.executable, "-m", "services.object.gateway", "--config", str(cfg), "--port", "1"],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (bad, done.stderr)
        assert done.stderr.strip().count("\n") == 0 and "'commit_gather_ms' must be a number" in done.stderr
    cfg.write_text(json.dumps({"data_root": str(tmp_path / "data"), "commit_gather_ms": 0.5}))
    assert parse_config(cfg.read_text())["commit_gather_ms"] == 0.5
