"""NBD, vhost-user-blk and NVMe-oF exports made through the REST API: nbdcopy/nbdinfo read
and write them, QoS changes live by PATCH, nvmf runs on an spdk pool (against the FAKE
spdk_tgt in tests/fakes: no real spdk_tgt can be installed here)."""
import hashlib
import os
import subprocess
import time

import pytest

from services.block.service import runtime
from services.block.tests.planefixtures import (  # noqa: F401  (fixtures)
    MiB,
    block_daemons,
    make_volume,
    post,
)

pytestmark = pytest.mark.django_db
HOST_NQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"


def nbdcopy(src, dst, *extra):
    return subprocess.run(["nbdcopy", *extra, str(src), str(dst)], capture_output=True, check=False,
                          text=True, timeout=120)


def nbd_size(uri):
    cp = subprocess.run(["nbdinfo", "--size", uri], capture_output=True, check=False,
                        text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    return int(cp.stdout)


def limits(export_id):
    with runtime() as rt:
        return rt.qsd.qmp("qom-get", {"path": f"qos-{export_id}", "property": "limits"})


def test_nbd_export_bytes_qos_resize(api, block, tmp_path):
    make_volume(api, "v1", 32 * MiB)
    exp = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd",
                                               "allow_any": True})
    assert exp["state"] == "online"
    assert exp["port"] == block["nbd_port"] and exp["name"] == exp["export_id"]
    assert exp["uri"] == f"nbd://127.0.0.1:{block['nbd_port']}/{exp['name']}"

    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(32 * MiB))
    assert nbdcopy(src, exp["uri"], "--flush").returncode == 0
    out = tmp_path / "out.bin"
    cp = nbdcopy(exp["uri"], out)
    assert cp.returncode == 0, cp.stderr
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(src.read_bytes()).digest()

    # QoS by PATCH: the throttle group changes live, and the rate holds (10 MB/s +-15 %)
    limit, total = 10_000_000, 20_000_000
    r = api.patch(f"/api/v1/block-exports/{exp['id']}/", {"bps_write": limit}, format="json")
    assert r.status_code == 200 and r.json()["bps_write"] == limit, r.json()
    assert limits(exp["export_id"])["bps-write"] == limit
    part = tmp_path / "part.bin"
    part.write_bytes(os.urandom(total))
    start = time.monotonic()
    assert nbdcopy(part, exp["uri"], "--flush").returncode == 0
    rate = total / (time.monotonic() - start)
    assert 0.85 * limit <= rate <= 1.15 * limit, f"rate {rate / 1e6:.2f} MB/s"
    r = api.patch(f"/api/v1/block-exports/{exp['id']}/", {"bps_write": 0, "iops_read": 500},
                  format="json")
    assert r.status_code == 200, r.json()
    got = limits(exp["export_id"])
    assert got["bps-write"] == 0 and got["iops-read"] == 500

    # resize through the storage API: same name and port, new size
    r = api.post("/api/v1/volumes/v1/resize/", {"size_bytes": 48 * MiB}, format="json")
    assert r.status_code == 200, r.json()
    assert nbd_size(exp["uri"]) == 48 * MiB
    assert api.delete("/api/v1/volumes/v1/").status_code == 409
    assert api.delete(f"/api/v1/block-exports/{exp['id']}/").status_code == 204
    assert subprocess.run(["nbdinfo", "--size", exp["uri"]], capture_output=True, check=False,
                          timeout=60).returncode != 0


def test_vhost_user_blk_and_read_only_nbd(api, block, tmp_path):
    make_volume(api, "v2", 8 * MiB)
    vh = post(api, "/api/v1/block-exports/", {"volume": "v2", "protocol": "vhost-user-blk"})
    assert vh["socket"].endswith(f"{vh['export_id']}.sock") and os.path.exists(vh["socket"])
    ro = post(api, "/api/v1/block-exports/", {"volume": "v2", "protocol": "nbd",
                                              "read_only": True, "allow_any": True})
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(MiB))
    assert nbdcopy(src, ro["uri"]).returncode != 0           # read-only refuses writes
    assert nbd_size(ro["uri"]) == 8 * MiB
    r = api.post("/api/v1/block-exports/", {"volume": "v2", "protocol": "nbd",
                                            "host_group": "nope"}, format="json")
    assert r.status_code == 400, r.json()


@pytest.fixture
def spdk(data_dir):
    """A real nvmf_tgt where `strata up` runs it (<data_dir>/run/spdk): the plane's spdk
    driver finds its socket there."""
    from dataplane.spdk.target import SpdkTarget, spdk_unavailable, target_dir
    why = spdk_unavailable()
    if why:
        pytest.skip(why)
    target = SpdkTarget(target_dir(data_dir)).start()
    try:
        yield target
    finally:
        from services.storage.drivers import driver_for
        try:
            driver_for("spdk").rpc.close()
        finally:
            target.stop()


def _rpc(target, method, **params):
    from dataplane.spdk.rpc import SpdkRpc
    rpc = SpdkRpc(str(target.rpc_socket))
    try:
        return rpc.call(method, **params)
    finally:
        rpc.close()


def test_nvmf_export_on_an_spdk_pool(api, block, spdk):
    from services.storage import service as storage
    storage.create_pool(name="fast", driver="spdk", devices=[{"path": "malloc:64M"}])
    make_volume(api, "db1", 16 * MiB, pool="fast")
    post(api, "/api/v1/hosts/", {"name": "db", "nqn": HOST_NQN})
    post(api, "/api/v1/host-groups/", {"name": "dbs", "hosts": ["db"]})
    r = api.post("/api/v1/block-exports/", {"volume": "db1", "protocol": "iscsi"},
                 format="json")
    assert r.status_code == 400 and "nvmf" in r.json()["detail"], r.json()
    exp = post(api, "/api/v1/block-exports/", {"volume": "db1", "protocol": "nvmf",
                                               "host_group": "dbs", "iops_total": 2000})
    assert exp["state"] == "online" and exp["trtype"] == "tcp", exp
    sub = _rpc(spdk, "nvmf_get_subsystems", nqn=exp["subsystem_nqn"])[0]
    assert [h["nqn"] for h in sub["hosts"]] == [HOST_NQN] and not sub["allow_any_host"]
    lvol = _rpc(spdk, "bdev_get_bdevs", name="fast/db1")[0]["name"]   # its UUID
    assert [ns["bdev_name"] for ns in sub["namespaces"]] == [lvol]
    limits = _rpc(spdk, "bdev_get_bdevs", name="fast/db1")[0]["assigned_rate_limits"]
    assert limits["rw_ios_per_sec"] == 2000
    r = api.patch(f"/api/v1/block-exports/{exp['id']}/", {"iops_total": 5000}, format="json")
    assert r.status_code == 200, r.json()
    limits = _rpc(spdk, "bdev_get_bdevs", name="fast/db1")[0]["assigned_rate_limits"]
    assert limits["rw_ios_per_sec"] == 5000
    assert api.delete("/api/v1/volumes/db1/").status_code == 409
    assert api.delete(f"/api/v1/block-exports/{exp['id']}/").status_code == 204
    assert exp["subsystem_nqn"] not in {s["nqn"] for s in _rpc(spdk, "nvmf_get_subsystems")}
    assert api.delete("/api/v1/volumes/db1/").status_code == 204
