"""Daemons restarted (as by a new `strata up`): the bootstrap re-applies every export."""
import os
import subprocess

import pytest

from services.block import up
from services.block.bootstrap import bootstrap
from services.block.models import BlockExport
from services.block.tests.planefixtures import (  # noqa: F401  (fixtures)
    CLIENT,
    MiB,
    block_daemons,
    iscsi_tool,
    make_volume,
    post,
    start_specs,
    stop_specs,
)

pytestmark = pytest.mark.django_db


def test_bootstrap_reapplies_exports_into_fresh_daemons(api, block, data_dir):
    make_volume(api, "v1", 16 * MiB)
    post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT})
    post(api, "/api/v1/host-groups/", {"name": "hg1", "hosts": ["client1"]})
    iscsi = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "iscsi",
                                                 "host_group": "hg1"})
    nbd = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "nbd",
                                               "read_only": True, "allow_any": True})
    # a second `strata up`: new daemons with nothing in them (the fixture's ones are stopped
    # first, and the fixture's teardown then finds them gone)
    stop_specs(block["started"])
    block["started"][:] = start_specs(up.daemons(data_dir, block), str(data_dir))
    assert iscsi_tool("iscsi-inq", iscsi, user=None).returncode != 0
    creds = bootstrap({})
    assert creds["iscsi_portal"] == f"127.0.0.1:{block['iscsi_port']}"
    assert iscsi_tool("iscsi-inq", iscsi, user=None).returncode == 0
    cp = subprocess.run(["nbdinfo", "--size", nbd["uri"]], capture_output=True, check=False,
                        text=True, timeout=60)
    assert cp.returncode == 0 and int(cp.stdout) == 16 * MiB, cp.stderr
    assert set(BlockExport.objects.values_list("state", flat=True)) == {"online"}
    from services.block.health import service_health
    assert {k: v["state"] for k, v in service_health().items()} == {"iscsi": "ok", "nbd": "ok"}


def test_bootstrap_records_an_export_that_cannot_be_applied(api, block):
    vol = make_volume(api, "v2", 16 * MiB)
    exp = post(api, "/api/v1/block-exports/", {"volume": "v2", "protocol": "nbd",
                                               "allow_any": True})
    # the volume's file vanished behind the plane's back: the error lands on the row
    BlockExport.objects.filter(pk=exp["id"]).update(read_only=True)   # forces a re-export
    os.rename(vol["path"], vol["path"] + ".gone")
    bootstrap({})
    row = api.get(f"/api/v1/block-exports/{exp['id']}/").json()
    assert row["state"] == "error" and row["error"], row
    os.rename(vol["path"] + ".gone", vol["path"])
    bootstrap({})
    assert api.get(f"/api/v1/block-exports/{exp['id']}/").json()["state"] == "online"
