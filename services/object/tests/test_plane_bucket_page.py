"""A bucket's console page in Debian's Chromium (Playwright): a viewer opens it from the bucket
list and sees the settings the gateway enforces (ACL, object ownership, public access block,
policy, CORS, default encryption with its KMS key, Object Lock), whether they were set through
the REST API or over S3. A screenshot lands in test-output/screenshots/bucket-page.png."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import _user
from services.object.tests.planefixture import plane  # noqa: F401 (plane: a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[3]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def test_bucket_page_shows_every_setting(plane, api, live_server, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: scripts/setup.sh installs it")
    from playwright.sync_api import sync_playwright

    kid = api.post("/api/v1/kms-keys/", {"alias": "ckpt"}, format="json").json()["key_id"]
    made = api.post("/api/v1/buckets/", {
        "name": "vault", "object_lock": True, "lock_mode": "GOVERNANCE", "lock_days": 3,
        "encryption": "aws:kms", "kms_key_id": "alias/ckpt", "acl": "authenticated-read",
        "object_ownership": "BucketOwnerPreferred"}, format="json")
    assert made.status_code == 201, made.content
    changed = api.patch("/api/v1/buckets/vault/", {"public_access_block": {
        "BlockPublicPolicy": True, "RestrictPublicBuckets": True}}, format="json")
    assert changed.status_code == 200, changed.content
    policy = {"Version": "2012-10-17", "Statement": [{
        "Sid": "TrainerReads", "Effect": "Allow", "Principal": {"AWS": "trainer"},
        "Action": "s3:GetObject", "Resource": "arn:aws:s3:::vault/ckpt/*"}]}
    assert api.put("/api/v1/buckets/vault/policy/", {"policy": policy}, format="json").status_code == 200
    plane.admin_s3.put_bucket_cors(Bucket="vault", CORSConfiguration={"CORSRules": [{   # over S3
        "ID": "notebooks", "AllowedOrigins": ["https://notebook.example"], "AllowedMethods": ["GET", "PUT"],
        "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600}]})

    _user("viewer", "viewer")
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(str(tmp_path / "profile"), executable_path=CHROMIUM,
                                                    headless=True, args=FLAGS,
                                                    viewport={"width": 1300, "height": 900})
        try:
            page = ctx.new_page()
            page.goto(live_server.url + "/login/")
            page.fill("#id_username", "viewer")
            page.fill("#id_password", "pw-viewer-123")
            page.click("button[type=submit]")
            page.wait_for_url(re.compile(r".*/console/$"))
            page.goto(live_server.url + "/console/buckets/")
            page.click("tr[data-key=vault] a")
            page.wait_for_url(re.compile(r".*/console/buckets/vault/$"))
            seen = {name: page.locator(f"[data-setting={name}]").inner_text()
                    for name in ("versioning", "acl", "object_ownership", "public_access_block", "policy",
                                 "cors", "encryption", "object_lock")}
            flags = {el.get_attribute("data-flag"): el.get_attribute("data-on")
                     for el in page.locator("[data-flag]").all()}
            out = ROOT / "test-output" / "screenshots"
            out.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out / "bucket-page.png"), full_page=True)
        finally:
            ctx.close()

    assert seen["versioning"] == "Enabled"
    assert seen["acl"] == "authenticated-read"
    assert seen["object_ownership"] == "BucketOwnerPreferred"
    assert flags == {"BlockPublicAcls": "false", "IgnorePublicAcls": "false", "BlockPublicPolicy": "true",
                     "RestrictPublicBuckets": "true"}
    assert json.loads(seen["policy"]) == policy
    assert "notebooks" in seen["cors"] and "https://notebook.example" in seen["cors"]
    assert "GET, PUT" in seen["cors"] and "600" in seen["cors"]
    assert "SSE-KMS" in seen["encryption"] and kid in seen["encryption"] and "alias/ckpt" in seen["encryption"]
    assert seen["object_lock"] == "enabled, default retention GOVERNANCE for 3 days"
