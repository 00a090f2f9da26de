"""The SPDK target for tests: one real ``nvmf_tgt`` per test session, started on first use.

Use the ``spdk_target`` fixture (registered for the whole suite by the root conftest.py), or,
where a fixture cannot be asked for (driver factories), :func:`shared_target`. Both return a
started :class:`dataplane.spdk.target.SpdkTarget`, emptied of every pool and export the
previous test left (:func:`reset_target`), so that each test starts from a blank target
without paying for a new process. The target is stopped when the session ends.

Also here: :func:`spdk_dd`, SPDK's user-space NVMe/TCP initiator, for byte round trips.
"""
import atexit
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

_target = None


def spdk_unavailable() -> str | None:
    """Why a real nvmf_tgt cannot run here, or None."""
    from dataplane.spdk.target import spdk_unavailable as why
    return why()


def shared_target():
    """The session's nvmf_tgt, started on the first call and reset on every call (skips
    without SPDK)."""
    global _target
    why = spdk_unavailable()
    if why:
        pytest.skip(why)
    if _target is not None and not _target.running():
        _target.stop()          # a test killed it: start a new one
        _target = None
    if _target is None:
        from dataplane.spdk.target import SpdkTarget

        target = SpdkTarget(tempfile.mkdtemp(prefix="strata-test-spdk-"))
        target.start()
        _target = target
        atexit.register(stop_shared_target)
    reset_target(_target)
    return _target


def stop_shared_target() -> None:
    """Stop the session's nvmf_tgt and remove its directory (called when the session ends)."""
    global _target
    if _target is not None:
        target, _target = _target, None
        target.stop()
        shutil.rmtree(target.state_dir, ignore_errors=True)


def reset_target(target) -> None:
    """Delete every subsystem, lvol store and base bdev of ``target`` (not its transports)."""
    from dataplane.spdk.rpc import SpdkRpc

    rpc = SpdkRpc(str(target.rpc_socket), timeout=30)
    try:
        for sub in rpc.call("nvmf_get_subsystems"):
            if sub.get("subtype") == "NVMe":
                rpc.call("nvmf_delete_subsystem", nqn=sub["nqn"])
        for lvs in rpc.call("bdev_lvol_get_lvstores"):
            rpc.call("bdev_lvol_delete_lvstore", uuid=lvs["uuid"])
        bdevs = rpc.call("bdev_get_bdevs")
        for b in bdevs:
            if b.get("product_name") == "Raid Volume":
                rpc.call("bdev_raid_delete", name=b["name"])
        for b in rpc.call("bdev_get_bdevs"):
            method = {"AIO disk": "bdev_aio_delete",
                      "Malloc disk": "bdev_malloc_delete"}.get(b.get("product_name"))
            if method:
                rpc.call(method, name=b["name"])
    finally:
        rpc.close()


@pytest.fixture(scope="session")
def spdk_target():
    """A running nvmf_tgt (interrupt mode, no hugepages), blank at each use."""
    return shared_target()


@pytest.fixture
def blank_target(spdk_target):
    """The session's nvmf_tgt, emptied for this test."""
    reset_target(spdk_target)
    return spdk_target


def attach_config(traddr: str, trsvcid, subnqn: str, hostnqn: str, name: str = "remote",
                  dhchap_key_file=None) -> dict:
    """An spdk_dd config attaching one NVMe/TCP controller as bdev ``<name>n1``."""
    from dataplane.spdk.target import initiator_config

    return initiator_config(traddr, trsvcid, subnqn, hostnqn, name, dhchap_key_file)


def key_file(path, secret: str):
    """``secret`` in a file only its owner can read (SPDK's keyring_file refuses others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret)
    return path


def spdk_dd(args: list, config: dict, workdir, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run SPDK's ``spdk_dd`` (no hugepages, its own core lock off) with a JSON bdev config;
    the result's ``returncode``/``stdout`` tell how it went."""
    from dataplane.spdk.target import run_app, spdk_binary

    binary = spdk_binary("spdk_dd")
    if binary is None:
        pytest.skip("spdk_dd is not built (scripts/build-spdk.sh)")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / f"spdk_dd-{os.getpid()}-{len(list(workdir.iterdir()))}.json"
    cfg.write_text(json.dumps(config))
    argv = [binary, "--no-huge", "-s", "256", "-m", "0x2", "-u", "--disable-cpumask-locks",
            "--num-trace-entries", "0", "--json", str(cfg), *args]
    return run_app(argv, timeout)
