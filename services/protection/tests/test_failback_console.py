"""The replications page of the web console offers failback: "Fail back" (a job, watched)
and "Abandon failback", each behind a confirm dialog saying what happens to this side's
writes. The failback's steps are tested through REST in test_replication.py; here Debian's
Chromium (Playwright) runs one from the page, the peer being pytest-django's ``live_server``
(same code and database, the replica on its own pool), as test_replication.py does."""
import html
import json
import os
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from conftest import _user
from services.protection.models import Replication, ReplicationPeer
from services.protection.tests.helpers import file_hashes, write_files
from services.storage.models import FileSystem, Pool
from tests.kit import run_job

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


CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.mark.root
@pytest.mark.django_db(transaction=True)
def test_fail_back_from_the_console(api, worker, live_server, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: `make test` installs it")
    from playwright.sync_api import sync_playwright

    for pool in ("site-a", "site-b"):
        r = api.post("/api/v1/pools/", {"name": pool, "driver": "local",
                                        "devices": ["image:400M"]}, format="json")
        assert r.status_code == 201, r.json()
    src = api.post("/api/v1/filesystems/", {"name": "docs", "pool": "site-a"},
                   format="json").json()["path"]
    write_files(src, {"report": os.urandom(1 << 20)})
    token = api.token
    assert api.post("/api/v1/replication-peers/", {"name": "b", "url": live_server.url,
                                                   "token": token},
                    format="json").status_code == 201
    assert api.post("/api/v1/replications/", {
        "name": "docs-dr", "filesystem": "docs", "peer": "b", "target_pool": "site-b",
        "target_name": "docs-replica"}, format="json").status_code == 201
    assert run_job(api, "/api/v1/replications/docs-dr/sync/")["state"] == "succeeded"
    # failover, then both sides are written
    r = api.post("/api/v1/replicas/docs-replica/promote/", {"name": "docs-live"}, format="json")
    assert r.status_code == 201, r.json()
    write_files(r.json()["path"], {"report": b"edited at site b", "new-at-b": b"b"})
    at_b = file_hashes(r.json()["path"])
    write_files(src, {"late-at-a": b"written at site a after the failover"})
    at_a = file_hashes(src)

    _user("operator", "operator")
    dialogs = []
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=FLAGS)
        try:
            page = ctx.new_page()
            page.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
            page.goto(live_server.url + "/login/")
            page.fill("#id_username", "operator")
            page.fill("#id_password", "pw-operator-123")
            page.click("button[type=submit]")
            page.wait_for_url(re.compile(r".*/console/$"))
            page.goto(live_server.url + "/console/replications/")
            row = page.locator("tr[data-key=docs-dr]")
            row.locator("button", has_text=re.compile("^Fail back$")).click()
            page.wait_for_selector("[data-job-watch][data-state=succeeded]", timeout=120_000)
            page.wait_for_load_state("load")

            # nothing under way any more: abandoning is refused with the API's reason
            page.goto(live_server.url + "/console/replications/")
            page.locator("tr[data-key=docs-dr] button", has_text="Abandon failback").click()
            page.wait_for_function(
                "document.querySelector('[data-page-error]').textContent.length > 0")
            error = page.locator("[data-page-error]").inner_text()
        finally:
            ctx.close()

    assert "docs-dr" in dialogs[0] and "{name}" not in dialogs[0]
    assert "kept in a snapshot failback-docs-dr-" in dialogs[0]
    assert "Abandon the failback of docs-dr" in dialogs[1]
    assert "no failback of docs-dr is under way" in error
    # A has B's writes in place; A's own late writes are in the snapshot the dialog named
    assert file_hashes(src) == at_b
    kept = [s for s in FileSystem.objects.get(name="docs").snapshots.values_list(
        "name", flat=True) if s.startswith("failback-docs-dr-")]
    assert len(kept) == 1
    assert file_hashes(os.path.join(src, ".snapshots", kept[0])) == at_a
    assert Replication.objects.get(name="docs-dr").failback == {}
