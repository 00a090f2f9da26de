"""NVMe-oF/TCP exports of spdk volumes on a real nvmf_tgt, read and written by SPDK's
user-space initiator ``spdk_dd`` (the host kernel has no nvme-tcp): bytes round-trip exactly,
a host NQN outside the export's list is refused, and snapshots keep their bytes.
"""

import hashlib
import os

import pytest

from dataplane import DeviceSpec
from dataplane.errors import InUse, InvalidArgument
from dataplane.spdk.driver import SpdkDriver
from plumbing.process import free_port
from dataplane.spdk.dhchap import generate_dhchap_key
from dataplane.spdk.target import SpdkTarget
from tests.spdk_support import attach_config, key_file, spdk_dd

MiB = 1 << 20
HOST_A = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
HOST_B = "nqn.2014-08.org.nvmexpress:uuid:66666666-7777-8888-9999-000000000000"


@pytest.fixture
def drv(blank_target, tmp_path):
    d = SpdkDriver(tmp_path / "state", rpc_socket=str(blank_target.rpc_socket), timeout=30)
    yield d
    d.rpc.close()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_volume(export: dict, host: str, data: bytes, workdir, seek_mib: int = 0, key=None):
    src = workdir / f"in-{sha(data)[:8]}"
    src.write_bytes(data)
    cfg = attach_config(export["traddr"], export["trsvcid"], export["subsystem_nqn"], host,
                        dhchap_key_file=key)
    return spdk_dd([f"--if={src}", "--ob=remoten1", f"--bs={MiB}", f"--seek={seek_mib}"],
                   cfg, workdir)


def read_volume(export: dict, host: str, length: int, workdir, skip_mib: int = 0, key=None):
    """(the spdk_dd result, the bytes it read or None); ``key``: a DH-HMAC-CHAP key file."""
    out = workdir / f"out-{os.urandom(4).hex()}"
    cfg = attach_config(export["traddr"], export["trsvcid"], export["subsystem_nqn"], host,
                        dhchap_key_file=key)
    proc = spdk_dd(["--ib=remoten1", f"--of={out}", f"--bs={MiB}", f"--skip={skip_mib}",
                    f"--count={length // MiB}"], cfg, workdir)
    data = out.read_bytes() if out.exists() else None
    return proc, data


def test_spdk_dd_round_trip_and_host_allow_list(drv, tmp_path):
    drv.create_pool("p1", [DeviceSpec("image:128M")])
    drv.create_volume("p1", "db", 16 * MiB)
    port = free_port()
    exp = drv.export_volume_nvmf("p1", "db", hosts=[HOST_A], traddr="127.0.0.1", trsvcid=port)
    assert exp["subsystem_nqn"] == "nqn.2026-01.io.strata:p1.db" and exp["trsvcid"] == str(port)

    data = os.urandom(4 * MiB)
    w = write_volume(exp, HOST_A, data, tmp_path, seek_mib=3)
    assert w.returncode == 0, w.stdout
    r, back = read_volume(exp, HOST_A, 4 * MiB, tmp_path, skip_mib=3)
    assert r.returncode == 0, r.stdout
    assert sha(back) == sha(data)
    # the lvol holds the bytes: 4 MiB of clusters allocated in a thin volume
    assert drv.volume_info("p1", "db").used_bytes == 4 * MiB

    # a host outside the list is refused, for reads and writes
    r, back = read_volume(exp, HOST_B, MiB, tmp_path)
    assert r.returncode != 0 and not back, r.stdout
    w = write_volume(exp, HOST_B, os.urandom(MiB), tmp_path)
    assert w.returncode != 0, w.stdout

    # the list changes live: B in, A out
    out = drv.set_nvmf_hosts("p1", "db", [HOST_B])
    assert out["plan"] == {"add": [f"{exp['subsystem_nqn']} host {HOST_B}"],
                           "remove": [f"{exp['subsystem_nqn']} host {HOST_A}"]}
    r, back = read_volume(exp, HOST_B, 4 * MiB, tmp_path, skip_mib=3)
    assert r.returncode == 0 and sha(back) == sha(data), r.stdout
    r, _ = read_volume(exp, HOST_A, MiB, tmp_path)
    assert r.returncode != 0

    with pytest.raises(InUse, match="exported over NVMe-oF"):
        drv.delete_volume("p1", "db")
    with pytest.raises(InvalidArgument):
        drv.export_volume_nvmf("p1", "db", hosts=["not-an-nqn"])
    drv.unexport_volume_nvmf("p1", "db")
    assert drv.rpc.call("nvmf_get_subsystems")[1:] == []     # only the discovery subsystem
    drv.delete_volume("p1", "db")


def test_snapshot_clone_and_resize_seen_over_nvmf(drv, tmp_path):
    drv.create_pool("p1", [DeviceSpec("image:128M")])
    drv.create_volume("p1", "vm", 8 * MiB)
    exp = drv.export_volume_nvmf("p1", "vm", hosts=[HOST_A], trsvcid=free_port())
    old, new = os.urandom(2 * MiB), os.urandom(2 * MiB)
    assert write_volume(exp, HOST_A, old, tmp_path).returncode == 0
    drv.create_snapshot("p1", "volume", "vm", "before")
    assert write_volume(exp, HOST_A, new, tmp_path).returncode == 0

    # a clone of the snapshot, exported on its own, reads the old bytes; the volume the new
    drv.clone_snapshot("p1", "volume", "vm", "before", "vm-old")
    old_exp = drv.export_volume_nvmf("p1", "vm-old", hosts=[HOST_A], trsvcid=free_port())
    r, back = read_volume(old_exp, HOST_A, 2 * MiB, tmp_path)
    assert r.returncode == 0 and sha(back) == sha(old), r.stdout
    r, back = read_volume(exp, HOST_A, 2 * MiB, tmp_path)
    assert r.returncode == 0 and sha(back) == sha(new), r.stdout

    # grown while exported: the namespace follows, and the new end is writable
    drv.resize_volume("p1", "vm", 32 * MiB)
    tail = os.urandom(MiB)
    assert write_volume(exp, HOST_A, tail, tmp_path, seek_mib=31).returncode == 0
    r, back = read_volume(exp, HOST_A, MiB, tmp_path, skip_mib=31)
    assert r.returncode == 0 and back == tail, r.stdout


def test_reconcile_puts_back_a_subsystem_deleted_behind_our_back(drv, tmp_path):
    drv.create_pool("p1", [DeviceSpec("image:64M")])
    drv.create_volume("p1", "db", 8 * MiB)
    exp = drv.export_volume_nvmf("p1", "db", hosts=[HOST_A], trsvcid=free_port())
    data = os.urandom(MiB)
    assert write_volume(exp, HOST_A, data, tmp_path).returncode == 0
    drv.rpc.call("nvmf_delete_subsystem", nqn=exp["subsystem_nqn"])
    assert read_volume(exp, HOST_A, MiB, tmp_path)[0].returncode != 0
    plan = drv.reconcile_nvmf()
    assert f"subsystem {exp['subsystem_nqn']}" in plan["add"]
    r, back = read_volume(exp, HOST_A, MiB, tmp_path)
    assert r.returncode == 0 and back == data, r.stdout
    assert drv.reconcile_nvmf() == {"add": [], "remove": []}


def test_dh_hmac_chap_key_is_required_and_checked(drv, tmp_path):
    drv.create_pool("p1", [DeviceSpec("image:64M")])
    drv.create_volume("p1", "db", 8 * MiB)
    secret, other = generate_dhchap_key(), generate_dhchap_key()
    right, wrong = key_file(tmp_path / "right", secret), key_file(tmp_path / "wrong", other)

    # a key of the wrong form is refused naming the field; nothing is made on the target
    for bad in ("DHHC-1:00:bm90IGEga2V5:", secret[:-6] + "AAAA=:", "secret"):
        with pytest.raises(InvalidArgument, match="dhchap_key"):
            drv.export_volume_nvmf("p1", "db", hosts=[HOST_A], host_keys={HOST_A: bad},
                                   trsvcid=free_port())
    with pytest.raises(InvalidArgument, match="not among the export's hosts"):
        drv.export_volume_nvmf("p1", "db", hosts=[HOST_A], host_keys={HOST_B: secret})
    assert drv.rpc.call("nvmf_get_subsystems")[1:] == [] and drv.nvmf_exports() == []

    exp = drv.export_volume_nvmf("p1", "db", hosts=[HOST_A, HOST_B],
                                 host_keys={HOST_A: secret}, trsvcid=free_port())
    assert exp["dhchap_hosts"] == [HOST_A] and secret not in str(exp)
    data = os.urandom(MiB)
    assert write_volume(exp, HOST_A, data, tmp_path, key=right).returncode == 0
    r, back = read_volume(exp, HOST_A, MiB, tmp_path, key=right)
    assert r.returncode == 0 and back == data, r.stdout
    # host A without its key, or with another, is refused; host B needs none
    assert read_volume(exp, HOST_A, MiB, tmp_path)[0].returncode != 0
    assert read_volume(exp, HOST_A, MiB, tmp_path, key=wrong)[0].returncode != 0
    r, back = read_volume(exp, HOST_B, MiB, tmp_path)
    assert r.returncode == 0 and back == data, r.stdout

    # a new key for A: the old one stops working at once
    drv.set_nvmf_hosts("p1", "db", [HOST_A, HOST_B], host_keys={HOST_A: other})
    assert read_volume(exp, HOST_A, MiB, tmp_path, key=right)[0].returncode != 0
    assert read_volume(exp, HOST_A, MiB, tmp_path, key=wrong)[0].returncode == 0
    keys = drv.state_dir / "nvmf-keys"
    assert [f.read_text() for f in keys.iterdir()] == [other]
    assert {f.stat().st_mode & 0o777 for f in keys.iterdir()} == {0o600}
    drv.unexport_volume_nvmf("p1", "db")
    assert list(keys.iterdir()) == [] and drv.rpc.call("keyring_get_keys") == []


def test_keys_and_subsystems_come_back_after_a_target_restart(tmp_path):
    """A target of its own, killed: the pool is activated again and reconcile_nvmf puts the
    keyring, the subsystem and its hosts back."""
    target = SpdkTarget(tmp_path / "tgt").start()
    try:
        drv = SpdkDriver(tmp_path / "state", rpc_socket=str(target.rpc_socket), timeout=30)
        drv.create_pool("p1", [DeviceSpec("image:64M")])
        drv.create_volume("p1", "db", 8 * MiB)
        secret = generate_dhchap_key(48)
        right = key_file(tmp_path / "right", secret)
        exp = drv.export_volume_nvmf("p1", "db", hosts=[HOST_A], host_keys={HOST_A: secret},
                                     trsvcid=free_port())
        data = os.urandom(MiB)
        assert write_volume(exp, HOST_A, data, tmp_path, key=right).returncode == 0
        target.kill()
        drv.rpc.close()
        target.start()
        drv.activate_pool("p1")
        plan = drv.reconcile_nvmf()
        assert f"{exp['subsystem_nqn']} host {HOST_A} (DH-HMAC-CHAP)" in plan["add"]
        r, back = read_volume(exp, HOST_A, MiB, tmp_path, key=right)
        assert r.returncode == 0 and back == data, r.stdout
        assert read_volume(exp, HOST_A, MiB, tmp_path)[0].returncode != 0
        assert read_volume(exp, HOST_B, MiB, tmp_path)[0].returncode != 0
        drv.rpc.close()
    finally:
        target.stop()
