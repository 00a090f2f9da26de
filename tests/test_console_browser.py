"""The web console in Debian's Chromium through Playwright, against a live appliance with a
real worker. Screenshots of every page land in test-output/screenshots/."""
import hashlib
import re
from pathlib import Path

import pytest
import requests

from services.file.tests.nfs_client import connect, read_hash, sha, write_file
from tests.appliance import ROOT, Appliance

pytestmark = pytest.mark.root
SHOTS = ROOT / "test-output" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def appliance():
    app = Appliance().start()
    yield app
    app.destroy()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: `make test` installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM,
            headless=True, args=FLAGS, viewport={"width": 1400, "height": 900})
        yield ctx
        ctx.close()


def shot(page, name):
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def login(page, url, username, password):
    page.context.clear_cookies()
    page.goto(url + "/")
    assert "/login/" in page.url
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r".*/console/$"))


def create(page, fields: dict):
    page.click("details.create summary")
    for name, value in fields.items():
        el = page.locator(f"details.create [name={name}]")
        if el.evaluate("e => e.tagName") == "SELECT":
            el.select_option(value)
        else:
            el.fill(value)
    page.click("details.create button[type=submit]")


def test_operator_journey_and_viewer_limits(appliance, browser):
    creds = appliance.credentials
    page = browser.new_page()
    page.on("dialog", lambda d: d.accept(d.message.split('"')[1]))  # type the name to confirm
    login(page, appliance.url, creds["username"], creds["password"])
    shot(page, "dashboard")
    assert page.locator("text=default").first.is_visible()

    # a pool on an image device
    page.goto(appliance.url + "/console/pools/")
    create(page, {"name": "p2", "devices": "image:300M", "redundancy": "none"})
    page.wait_for_selector("tr[data-key=p2]")
    assert "online" in page.locator("tr[data-key=p2]").inner_text()

    # a bad name gets the API's message beside the field, and nothing is created
    page.goto(appliance.url + "/console/filesystems/")
    create(page, {"name": "Bad Name"})
    err = page.locator("details.create [data-error-for=name]")
    page.wait_for_function(
        "document.querySelector('details.create [data-error-for=name]').textContent.length > 0")
    assert "lower-case" in err.inner_text()
    page.fill("details.create [name=name]", "data")
    page.select_option("details.create [name=pool]", "p2")
    page.fill("details.create [name=quota_bytes]", "100M")
    page.click("details.create button[type=submit]")
    page.wait_for_selector("tr[data-key=data]")
    assert "100.0 MiB" in page.locator("tr[data-key=data]").inner_text()
    shot(page, "filesystems")

    # a scrub job's progress bar reaches 100%
    page.goto(appliance.url + "/console/pools/")
    page.click("tr[data-key=p2] >> text=Scrub")
    page.wait_for_function(
        "document.querySelector('[data-job-watch]').dataset.state === 'succeeded'", timeout=60000)
    assert page.locator("[data-job-watch] .pct").inner_text() == "100%"
    # beside the bar: the bytes it read, of how many, at what rate (as the CLI prints it)
    xfer = page.locator("[data-job-watch] .xfer").inner_text()
    assert re.fullmatch(r"\d+(\.\d)? (B|KiB|MiB) of \d+(\.\d)? (B|KiB|MiB), \d+\.\d MiB/s",
                        xfer), xfer
    scrub = next(j for j in requests.get(creds["api_url"] + "jobs/?limit=20", headers={
        "Authorization": f"Token {creds['token']}"}).json()["results"] if j["kind"] == "scrub")
    assert scrub["bytes_done"] == scrub["bytes_total"] > 0, scrub
    watched = appliance.cli("job", "watch", str(scrub["id"]))
    assert watched.returncode == 0 and f"{xfer} | scrub succeeded" in watched.stdout, watched
    page.wait_for_timeout(500)  # let the bar's 0.3 s transition finish for the screenshot
    shot(page, "pools")

    # an NFS export of that file system, made in the console, serves bytes to nfs-rs
    page.goto(appliance.url + "/console/nfs-exports/")
    create(page, {"filesystem": "data", "clients": "127.0.0.1 rw no_root_squash"})
    page.wait_for_selector("table.resources tr >> text=/data")
    assert "online" in page.locator("table.resources tbody tr").first.inner_text()
    shot(page, "nfs-exports")
    nfs = connect(appliance.nfs_port, "/data")
    write_file(nfs, "/hello.bin", b"h" * 100_000)
    assert read_hash(nfs, "/hello.bin") == (100_000, sha(b"h" * 100_000))
    page.click("table.resources tbody tr >> text=Delete")
    page.wait_for_selector("table.resources tr >> text=/data", state="detached")

    # pages of every kind render
    for slug in ("volumes", "snapshots", "jobs", "audit", "users", "buckets", "s3-keys",
                 "smb-shares", "hosts", "block-exports", "vector-collections",
                 "snapshot-schedules", "replications", "backups", "checkpoint-jobs"):
        page.goto(f"{appliance.url}/console/{slug}/")
        assert page.locator("h1").inner_text()
        shot(page, slug)
    page.goto(appliance.url + "/console/jobs/")
    assert "succeeded" in page.locator("table.resources").inner_text()
    assert xfer in page.locator("table.resources").inner_text()  # the scrub's bytes and rate

    # an admin makes a viewer; the viewer sees no buttons it may not press
    page.goto(appliance.url + "/console/users/")
    create(page, {"username": "vera", "password": "vera-password-1", "role": "viewer"})
    page.wait_for_selector("tr[data-key=vera]")
    page.click("text=Sign out")
    login(page, appliance.url, "vera", "vera-password-1")
    page.goto(appliance.url + "/console/pools/")
    assert page.locator("tr[data-key=p2]").is_visible()
    assert page.locator("button:has-text('Delete')").count() == 0
    assert page.locator("details.create").count() == 0
    assert page.locator("nav >> text=Users and roles").count() == 0
    shot(page, "pools-as-viewer")

    # the delete asks for the name; with it, the file system goes
    page.click("text=Sign out")
    login(page, appliance.url, creds["username"], creds["password"])
    page.goto(appliance.url + "/console/filesystems/")
    page.click("tr[data-key=data] >> text=Delete")
    page.wait_for_function("!document.querySelector('tr[data-key=data]')"
                           " || document.querySelector('[data-page-error]').textContent")
    assert page.locator("[data-page-error]").inner_text() == ""
    assert page.locator("tr[data-key=data]").count() == 0


def test_committed_checkpoint_appears_in_the_timeline(appliance, browser):
    creds = appliance.credentials
    api = requests.Session()
    api.headers["Authorization"] = f"Token {creds['token']}"
    base = creds["api_url"]
    assert api.post(base + "filesystems/", json={"name": "train"}).status_code == 201
    r = api.post(base + "checkpoint-jobs/", json={"name": "llm", "filesystem": "train"})
    assert r.status_code == 201, r.text
    version = api.post(base + "checkpoint-jobs/llm/versions/", json={"step": 100}).json()
    shard = Path(version["path"], "rank0.pt")
    shard.parent.mkdir(parents=True, exist_ok=True)
    shard.write_bytes(b"w" * 4096)
    r = api.post(base + f"checkpoint-jobs/llm/versions/{version['id']}/commit/", json={
        "manifest": [{"name": "rank0.pt", "size": 4096,
                      "sha256": hashlib.sha256(b"w" * 4096).hexdigest()}]})
    assert r.status_code == 200, r.text

    page = browser.new_page()
    login(page, appliance.url, creds["username"], creds["password"])
    page.goto(appliance.url + "/console/checkpoint-jobs/")
    page.click("text=llm")
    page.wait_for_url(re.compile(r".*/console/checkpoints/llm/$"))
    row = page.locator("table.timeline tr[data-step='100']")
    assert "committed" in row.inner_text() and "latest" in row.inner_text()
    assert "hot" in row.inner_text()
    row.locator("text=Pin").click()
    page.wait_for_selector("table.timeline tr[data-step='100'] >> text=Unpin")
    assert "pinned" in page.locator("table.retention").inner_text()
    shot(page, "checkpoint-timeline")
