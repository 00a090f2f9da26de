"""iSCSI exports made through the REST API, checked with libiscsi's tools and qemu-img."""
import hashlib
import os
import subprocess

import pytest

from services.block.tests.planefixtures import (  # noqa: F401  (fixtures)
    CLIENT,
    OTHER,
    SECRET,
    MiB,
    block_daemons,
    capacity,
    iscsi_tool,
    make_volume,
    post,
)

pytestmark = pytest.mark.django_db


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(4 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def image_opts(exp, initiator=CLIENT):
    host, port = exp["portal"].rsplit(":", 1)
    return (f"driver=iscsi,transport=tcp,portal={host}:{port},target={exp['target_iqn']},"
            f"lun={exp['lun']},initiator-name={initiator},user=client1,password={SECRET}")


def test_iscsi_export_acl_bytes_resize_and_refused_delete(api, block, tmp_path):
    vol = make_volume(api, "v1", 64 * MiB)
    host = post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT,
                                        "chap_user": "client1", "chap_secret": SECRET})
    assert "chap_secret" not in host
    post(api, "/api/v1/host-groups/", {"name": "hg1", "hosts": ["client1"]})
    exp = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "iscsi",
                                               "host_group": "hg1"})
    assert exp["state"] == "online" and exp["error"] == ""
    assert exp["target_iqn"] == "iqn.2026-01.io.strata:hg1" and exp["lun"] == 1
    assert exp["portal"] == f"127.0.0.1:{block['iscsi_port']}"

    inq = iscsi_tool("iscsi-inq", exp)
    assert inq.returncode == 0 and "DIRECT_ACCESS" in inq.stdout, inq.stderr
    assert capacity(exp) == 64 * MiB
    # an initiator that is not in the host group is refused
    assert iscsi_tool("iscsi-inq", exp, initiator=OTHER).returncode != 0
    # ... and so is the right initiator with a wrong CHAP secret
    assert iscsi_tool("iscsi-inq", exp, secret="wrong-secret-1").returncode != 0

    # bytes written through the iSCSI client land in the volume and read back by hash
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(32 * MiB))
    cp = subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-t", "none", str(src),
                         "--target-image-opts", image_opts(exp)],
                        capture_output=True, check=False, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    out = tmp_path / "out.bin"
    cp = subprocess.run(["qemu-img", "convert", "-O", "raw", "--image-opts", image_opts(exp),
                         str(out)], capture_output=True, check=False, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    with open(out, "rb") as f:
        head = f.read(32 * MiB)
    assert hashlib.sha256(head).hexdigest() == sha256(src)
    with open(vol["path"], "rb") as f:
        assert hashlib.sha256(f.read(32 * MiB)).hexdigest() == sha256(src)

    # resize through the storage API: the LUN grows without re-export
    r = api.post("/api/v1/volumes/v1/resize/", {"size_bytes": 96 * MiB}, format="json")
    assert r.status_code == 200, r.json()
    assert capacity(exp) == 96 * MiB
    assert api.get(f"/api/v1/block-exports/{exp['id']}/").json()["state"] == "online"

    # delete of an exported volume is refused, with the export named
    r = api.delete("/api/v1/volumes/v1/")
    assert r.status_code == 409, r.json()
    assert r.json()["error"] == "conflict" and exp["export_id"] in r.json()["detail"]
    assert os.path.exists(vol["path"])
    assert iscsi_tool("iscsi-inq", exp).returncode == 0
    # so is deleting the host group in use
    assert api.delete("/api/v1/host-groups/hg1/").status_code == 409

    # remove the export: the target goes away; then the volume can go
    assert api.delete(f"/api/v1/block-exports/{exp['id']}/").status_code == 204
    assert iscsi_tool("iscsi-inq", exp).returncode != 0
    assert api.delete("/api/v1/volumes/v1/").status_code == 204


def test_host_group_change_applies_live(api, block):
    make_volume(api, "v2", 16 * MiB)
    post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT})
    post(api, "/api/v1/hosts/", {"name": "other", "iqn": OTHER})
    post(api, "/api/v1/host-groups/", {"name": "hg1", "hosts": ["client1"]})
    exp = post(api, "/api/v1/block-exports/", {"volume": "v2", "protocol": "iscsi",
                                               "host_group": "hg1"})
    assert iscsi_tool("iscsi-inq", exp, initiator=OTHER, user=None).returncode != 0
    r = api.patch("/api/v1/host-groups/hg1/", {"hosts": ["client1", "other"]}, format="json")
    assert r.status_code == 200, r.json()
    assert iscsi_tool("iscsi-inq", exp, initiator=OTHER, user=None).returncode == 0
    # a host deleted leaves its groups' ACLs
    assert api.delete("/api/v1/hosts/other/").status_code == 204
    assert iscsi_tool("iscsi-inq", exp, initiator=OTHER, user=None).returncode != 0
    assert iscsi_tool("iscsi-inq", exp, user=None).returncode == 0


def test_bad_requests_are_clear_4xx(api, block):
    make_volume(api, "v3", 16 * MiB)
    r = api.post("/api/v1/block-exports/", {"volume": "v3", "protocol": "nvmf"}, format="json")
    assert r.status_code == 400 and "spdk pool" in r.json()["fields"]["protocol"][0], r.json()
    r = api.post("/api/v1/block-exports/", {"volume": "v3", "protocol": "iscsi",
                                            "bps_write": 1000000}, format="json")
    assert r.status_code == 400 and "QoS" in r.json()["detail"], r.json()
    r = api.post("/api/v1/hosts/", {"name": "h", "iqn": "client1"}, format="json")
    assert r.status_code == 400 and "iqn" in r.json()["fields"], r.json()
    r = api.post("/api/v1/hosts/", {"name": "h", "iqn": CLIENT, "chap_user": "u",
                                    "chap_secret": "short"}, format="json")
    assert r.status_code == 400 and "12 to 16" in r.json()["detail"], r.json()
    r = api.post("/api/v1/host-groups/", {"name": "any"}, format="json")
    assert r.status_code == 400, r.json()
    assert not api.get("/api/v1/block-exports/").json()["results"]
