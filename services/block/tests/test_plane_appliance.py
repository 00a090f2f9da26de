"""End to end: a real `strata up` starts tgtd and qemu-storage-daemon; an export made with
the CLI answers iscsi-inq; a second `strata up` re-applies it; Ctrl-C stops the daemons."""
import json
import shutil
import socket

import pytest

from services.block.tests.planefixtures import CLIENT, iscsi_tool

for tool in ("tgtd", "tgtadm", "qemu-storage-daemon", "iscsi-inq", "redis-server"):
    if shutil.which(tool) is None:
        pytest.skip(f"needs {tool}", allow_module_level=True)


@pytest.fixture
def app():
    from tests.appliance import Appliance
    a = Appliance()
    try:
        yield a.start()
    finally:
        a.destroy()


def cli_json(app, *args):
    cp = app.cli("--json", *args)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return json.loads(cp.stdout)


def listening(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_strata_up_serves_an_iscsi_export_made_with_the_cli(app):
    assert app.credentials["iscsi_portal"] == f"127.0.0.1:{app.iscsi_port}"
    assert listening(app.nbd_port)
    cli_json(app, "volume", "create", "v1", "32M")
    cli_json(app, "host", "create", "client1", "--iqn", CLIENT)
    cli_json(app, "host-group", "create", "hg1", "--host", "client1")
    exp = cli_json(app, "block-export", "create", "v1", "--protocol", "iscsi",
                   "--host-group", "hg1")
    assert exp["state"] == "online" and exp["portal"] == f"127.0.0.1:{app.iscsi_port}", exp
    inq = iscsi_tool("iscsi-inq", exp, user=None)
    assert inq.returncode == 0 and "DIRECT_ACCESS" in inq.stdout, inq.stderr
    cp = app.cli("volume", "delete", "v1")
    assert cp.returncode != 0 and "exported" in cp.stderr + cp.stdout

    out = app.stop()                    # Ctrl-C: tgtd (which ignores SIGTERM) goes too
    assert "Strata stopped." in out
    assert not listening(app.iscsi_port) and not listening(app.nbd_port)
    app.start()                         # the bootstrap puts the export back
    assert iscsi_tool("iscsi-inq", exp, user=None).returncode == 0
    assert cli_json(app, "block-export", "show", str(exp["id"]))["state"] == "online"
