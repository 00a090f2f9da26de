"""The replications page of the web console offers failback: "Fail back" (a job, watched)
and "Abandon failback", each behind a confirm dialog saying what happens to this side's
writes. The failback itself is tested through REST in test_replication.py."""
import html
import json
import re

import pytest
from django.contrib.auth.models import User

from conftest import _user
from services.protection.models import Replication, ReplicationPeer
from services.storage.models import FileSystem, Pool

pytestmark = pytest.mark.django_db


@pytest.fixture
def replication(data_dir):
    pool = Pool.objects.create(name="site-a", driver="directory")
    fs = FileSystem.objects.create(name="docs", pool=pool)
    peer = ReplicationPeer.objects.create(name="b", url="http://127.0.0.1:9", token="t")
    return Replication.objects.create(name="docs-dr", filesystem=fs, peer=peer,
                                      target_pool="default", target_name="docs-replica",
                                      failback={"phase": "rollback"})


def buttons(page: str, label: str) -> list[str]:
    return [b for b in re.findall(r"<button [^>]*>[^<]*</button>", page)
            if b.endswith(f">{label}</button>")]


def test_operator_sees_fail_back_and_abandon_with_their_confirm(client, replication):
    _user("operator", "operator")
    client.force_login(User.objects.get(username="operator"))
    page = client.get("/console/replications/").content.decode()

    [fail_back] = buttons(page, "Fail back")
    assert 'data-url="/api/v1/replications/{key}/failback/"' in fail_back
    assert 'data-key="docs-dr"' in fail_back and "data-watch-job" in fail_back
    confirm = html.unescape(re.search(r'data-confirm="([^"]*)"', fail_back)[1])
    assert "{name}" in confirm  # the dialog names the row: strata.js puts it in
    assert "written here after the common snapshot is not lost" in confirm
    assert "kept in a snapshot failback-{name}-" in confirm

    [abandon] = buttons(page, "Abandon failback")
    assert json.loads(html.unescape(re.search(r'data-extra="([^"]*)"', abandon)[1])) == {
        "abandon": True}
    assert "syncs are allowed again" in html.unescape(abandon)
    # the step of the failback under way is shown, so the operator knows one is pending
    row = re.search(r'<tr data-key="docs-dr".*?</tr>', page, re.S)[0]
    assert "<td>rollback</td>" in row


def test_viewer_gets_no_failback_buttons(client, replication):
    _user("viewer", "viewer")
    client.force_login(User.objects.get(username="viewer"))
    page = client.get("/console/replications/").content.decode()
    assert "docs-dr" in page and not buttons(page, "Fail back")
