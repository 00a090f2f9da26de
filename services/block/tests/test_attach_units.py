"""Attach recipes rendered alone (no Django, no daemons): NVMe-oF, whose hypervisor connects
with nvme-cli first, and the refusals of a recipe that cannot be made."""
import xml.etree.ElementTree as ET

import pytest

from plumbing.errors import Invalid
from services.block.attach import Client, recipe

NQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
NVMF = {"export_id": "exp-9", "protocol": "nvmf", "volume": "db1",
        "connection": {"subsystem_nqn": "nqn.2026-01.io.strata:db1", "trtype": "tcp",
                       "traddr": "10.0.0.5", "trsvcid": 4420, "nsid": 1}}


def test_nvmf_recipe_connects_the_hypervisor_then_gives_the_namespace():
    r = recipe(NVMF, Client("hv1", nqn=NQN))
    assert r["setup"][-1] == ("nvme connect -t tcp -a 10.0.0.5 -s 4420 "
                              f"-n nqn.2026-01.io.strata:db1 --hostnqn={NQN}")
    disk = ET.fromstring(r["libvirt"]["disk"])
    assert disk.get("type") == "block" and disk.find("source").get("dev") == "/dev/nvme0n1"
    assert "file=/dev/nvme0n1,if=none,id=strata0" in " ".join(r["qemu"]["args"])
    assert r["libvirt"]["secret"] is None


@pytest.mark.parametrize("export, kw, why", [
    ({**NVMF, "protocol": "fcp"}, {}, "no attach recipe for protocol"),
    ({**NVMF, "connection": {}}, {}, "is not online"),
    (NVMF, {"accel": "hvf"}, "accel must be one of tcg, kvm"),
])
def test_refusals(export, kw, why):
    with pytest.raises(Invalid, match=why):
        recipe(export, **kw)
