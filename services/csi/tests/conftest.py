"""One live appliance (`strata up`) for the CSI tests of a module, and the plugin beside it."""
import tempfile
from pathlib import Path

import pytest

from services.csi.tests.plugin import Plugin
from tests.appliance import Appliance


@pytest.fixture(scope="module")
def appliance():
    app = Appliance().start()
    yield app
    app.destroy()


@pytest.fixture
def workdir():
    # under /tmp/strata-test-*: a crashed run's mounts there are cleared by cleanup_leftovers
    return Path(tempfile.mkdtemp(prefix="strata-test-csi-"))


@pytest.fixture
def plugin(appliance, workdir):
    """The plugin (all services) with the appliance's admin token as its own."""
    creds = appliance.credentials
    plug = Plugin(workdir, creds["api_url"], creds["token"]).start()
    yield plug
    plug.stop()
