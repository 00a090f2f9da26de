"""Attach recipes from the API and the console: libvirt XML and QEMU arguments for every
block export, CHAP as a libvirt secret reference (the secret itself never appears), and the
errors a bad request gets. A real guest boots with these recipes in tests/test_vm_guest.py."""
import xml.etree.ElementTree as ET

import pytest

from services.block.tests.planefixtures import (  # noqa: F401  (fixtures)
    CLIENT,
    SECRET,
    MiB,
    block_daemons,
    make_volume,
    post,
)

pytestmark = pytest.mark.django_db


def recipe(api, export, expect=200, **params):
    r = api.get(f"/api/v1/block-exports/{export['id']}/attach/", params)
    assert r.status_code == expect, r.json()
    return r.json()


def test_recipes_for_nbd_vhost_and_iscsi_with_chap(api, client, block):
    make_volume(api, "v1", 8 * MiB)
    post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT, "chap_user": "client1",
                                 "chap_secret": SECRET})
    post(api, "/api/v1/hosts/", {"name": "other", "iqn": CLIENT + "x"})
    post(api, "/api/v1/host-groups/", {"name": "vms", "hosts": ["client1", "other"]})
    nbd = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd",
                                               "allow_any": True, "read_only": True})
    vhost = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "vhost-user-blk"})
    iscsi = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "iscsi",
                                                 "host_group": "vms"})

    r = recipe(api, nbd)
    disk = ET.fromstring(r["libvirt"]["disk"])
    assert disk.get("type") == "network" and disk.find("readonly") is not None
    src = disk.find("source")
    assert (src.get("protocol"), src.get("name")) == ("nbd", nbd["name"])
    assert src.find("host").attrib == {"name": "127.0.0.1", "port": str(block["nbd_port"])}
    assert f"file={nbd['uri']}," in " ".join(r["qemu"]["args"])
    domain = ET.fromstring(r["libvirt"]["domain"])
    assert domain.get("type") == "qemu" and domain.find("devices/disk") is not None
    assert ET.fromstring(recipe(api, nbd, accel="kvm")["libvirt"]["domain"]).get("type") == "kvm"

    r = recipe(api, vhost, memory_mib=1024)
    assert r["libvirt"]["disk"].count(vhost["socket"]) == 1
    domain = ET.fromstring(r["libvirt"]["domain"])
    assert domain.find("memoryBacking/access").get("mode") == "shared"
    assert "memory-backend-memfd,id=mem0,size=1024M,share=on" in r["qemu"]["args"]
    assert "-m 1024M" in r["qemu"]["command"]

    r = recipe(api, iscsi)                  # default: the group's host with CHAP
    assert r["client"] == "client1"
    src = ET.fromstring(r["libvirt"]["disk"]).find("source")
    assert src.get("name") == f"{iscsi['target_iqn']}/{iscsi['lun']}"
    assert src.find("initiator/iqn").get("name") == CLIENT
    auth = src.find("auth")
    assert auth.get("username") == "client1"
    assert auth.find("secret").attrib == {"type": "iscsi", "usage": r["libvirt"]["secret"]["usage"]}
    secret = ET.fromstring(r["libvirt"]["secret"]["xml"])
    assert secret.find("usage/target").text == r["libvirt"]["secret"]["usage"]
    assert secret.get("private") == "yes" and secret.find("uuid").text == r["libvirt"]["secret"]["uuid"]
    args = " ".join(r["qemu"]["args"])
    assert f"secret,id=strata0-chap,file={r['libvirt']['secret']['file']}" in args
    assert "user=client1,password-secret=strata0-chap" in args
    assert any("virsh secret-set-value" in line for line in r["setup"])
    assert SECRET not in str(r)
    other = recipe(api, iscsi, host="other")
    assert other["client"] == "other" and other["libvirt"]["secret"] is None

    # bad requests: a host outside the group, an unknown accelerator, a missing export
    r = recipe(api, iscsi, 400, host="nobody")
    assert "not in host group vms" in r["detail"]
    assert recipe(api, nbd, 400, host="client1")["error"]
    assert "accel" in str(recipe(api, nbd, 400, accel="xen"))
    assert recipe(api, nbd, 400, memory_mib=1)["error"]
    assert recipe(api, {"id": 999}, 404)["error"]

    # the console's page of the export shows the same recipe
    client.force_login(api.user)
    page = client.get(f"/console/block-exports/{iscsi['id']}/").content.decode()
    assert "virsh secret-define" in page and "qemu-system-x86_64" in page
    assert "strata-chap-client1" in page and SECRET not in page
    assert f'href="/console/block-exports/{iscsi["id"]}/"' in \
        client.get("/console/block-exports/").content.decode()


def test_schema_declares_the_attach_operation(api):
    schema = api.get("/api/v1/schema/?format=json").json()
    op = schema["paths"]["/api/v1/block-exports/{id}/attach/"]["get"]
    assert {p["name"] for p in op["parameters"]} >= {"id", "host", "accel", "memory_mib"}
    assert {"200", "400", "404"} <= set(op["responses"])


def test_cli_prints_the_domain_the_command_line_and_one_line_errors(api, block, live_server):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "STRATA_URL": live_server.url + "/api/v1/",
           "STRATA_TOKEN": api.token, "PYTHONPATH": str(root)}

    def strata(*args):
        return subprocess.run([sys.executable, "-m", "console.cli.main", *args], env=env,
                              cwd=root, capture_output=True, text=True, timeout=120)

    make_volume(api, "vm1", 8 * MiB)
    exp = post(api, "/api/v1/block-exports/", {"volume": "vm1", "protocol": "nbd",
                                               "allow_any": True})
    r = strata("block-export", "attach", "vm1", "--libvirt", "--accel", "kvm")
    assert r.returncode == 0, r.stderr
    domain = ET.fromstring(r.stdout)             # stdout is the XML alone: > vm.xml works
    assert domain.get("type") == "kvm" and domain.find("devices/disk/source").get("name") == \
        exp["name"]
    assert "# note: NBD has no per-host access control" in r.stderr
    r = strata("block-export", "attach", str(exp["id"]), "--qemu")
    assert r.returncode == 0 and r.stdout.startswith("qemu-system-x86_64 "), r.stderr
    assert f"file={exp['uri']}," in r.stdout
    r = strata("block-export", "attach", str(exp["id"]), "--secret")
    assert r.returncode == 1 and r.stderr == "strata: this export needs no CHAP secret\n"
    r = strata("block-export", "attach", "nothing-here")
    assert r.returncode == 1 and "volume nothing-here has 0 block exports" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
