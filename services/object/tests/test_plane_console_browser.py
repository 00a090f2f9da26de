"""The console's bucket and S3 key pages in Chromium against a live appliance: a bucket made
with the form exists on the gateway; a key made with the form shows its secret once, and that
secret works with boto3.

Needs the console to display ``show_once`` answers (proposed change to
console/static/console/strata.js); skipped until the console has it."""
import re
from pathlib import Path

import pytest

from services.object.tests.planefixture import s3_client
from tests.appliance import ROOT, Appliance

pytestmark = pytest.mark.root
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
STRATA_JS = ROOT / "console" / "static" / "console" / "strata.js"


@pytest.fixture
def appliance():
    if "show_once" not in STRATA_JS.read_text():
        pytest.skip("the console does not show show_once answers yet (see the object service report)")
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: `make test` installs it")
    app = Appliance()
    try:
        yield app.start()
    finally:
        app.destroy()


def test_bucket_and_key_through_the_console(appliance, tmp_path):
    from playwright.sync_api import sync_playwright

    creds = appliance.credentials
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                    headless=True, args=FLAGS)
        try:
            page = ctx.new_page()
            page.goto(appliance.url + "/")
            page.fill("#id_username", creds["username"])
            page.fill("#id_password", creds["password"])
            page.click("button[type=submit]")
            page.wait_for_url(re.compile(r".*/console/$"))

            page.goto(appliance.url + "/console/buckets/")
            page.click("details.create summary")
            page.fill("details.create [name=name]", "from-console")
            page.fill("details.create [name=quota_bytes]", "1G")
            page.click("details.create button[type=submit]")
            page.wait_for_selector("tr[data-key=from-console]")

            page.goto(appliance.url + "/console/s3-keys/")
            page.click("details.create summary")
            page.fill("details.create [name=user]", "notebook")
            page.click("details.create button[type=submit]")
            access = page.locator(".show-once code[data-field=access_key]").inner_text()
            secret = page.locator(".show-once code[data-field=secret_key]").inner_text()
            page.click(".show-once button")
            page.wait_for_selector(f"tr[data-key={access}]")
            assert secret not in page.content()
        finally:
            ctx.close()
    admin = s3_client(creds["s3_endpoint"], creds["s3_access_key"], creds["s3_secret_key"])
    assert "from-console" in [b["Name"] for b in admin.list_buckets()["Buckets"]]
    notebook = s3_client(creds["s3_endpoint"], access, secret)
    notebook.create_bucket(Bucket="notebook-bkt")
    notebook.put_object(Bucket="notebook-bkt", Key="k", Body=b"v")
    assert notebook.get_object(Bucket="notebook-bkt", Key="k")["Body"].read() == b"v"
