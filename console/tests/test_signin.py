"""Sign-ins: failures audited and backed off per user and address; tokens listed and revoked by
their owner and by admins; a changed password ends the user's sessions."""
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from plane.models import AuditEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(db):
    return User.objects.create_user("alice", password="right-password-1")


def _sign_in(password, addr="10.1.1.1", username="alice"):
    return Client(REMOTE_ADDR=addr).post("/login/", {"username": username, "password": password})


def test_an_attacker_at_one_address_cannot_lock_the_user_out_elsewhere(alice, settings):
    """Issue 34, medium 7: failures from one address locked every user there, and the user
    everywhere; now only the (user, address) pair backs off, and it is audited."""
    settings.STRATA_SIGNIN_FAILURES = 3
    User.objects.create_user("bob", password="bobs-password-1")
    for _ in range(3):
        assert _sign_in("wrong").status_code == 200  # the form again
    failures = AuditEvent.objects.filter(action="sign-in failed", remote_addr="10.1.1.1")
    assert failures.count() == 3 and set(failures.values_list("username", flat=True)) == {"alice"}
    refused = _sign_in("right-password-1")  # this pair backs off: not even checked
    assert refused.status_code == 200
    assert b"Too many failed sign-ins for alice from 10.1.1.1" in refused.content
    throttled = AuditEvent.objects.get(action="sign-in throttled", remote_addr="10.1.1.1")
    assert (throttled.username, throttled.result) == ("alice", "denied")
    assert failures.count() == 3  # a refused attempt does not stretch the back-off
    # the same user from another address, another user from this one: signed in
    assert _sign_in("right-password-1", addr="10.9.9.9").status_code == 302
    assert _sign_in("bobs-password-1", username="bob").status_code == 302


def test_the_back_off_passes_doubles_and_a_success_ends_it(alice, settings):
    settings.STRATA_SIGNIN_FAILURES, settings.STRATA_SIGNIN_BACKOFF = 2, 1
    for _ in range(2):
        _sign_in("wrong")
    assert b"Too many failed" in _sign_in("right-password-1").content
    time.sleep(1.2)  # backed off for 1 s after the 2nd failure
    assert b"Too many failed" not in _sign_in("wrong").content  # checked, and failed
    assert b"Too many failed" in _sign_in("right-password-1").content  # now 2 s
    time.sleep(1.2)
    assert b"Too many failed" in _sign_in("right-password-1").content
    time.sleep(1.0)
    assert _sign_in("right-password-1").status_code == 302
    assert b"Too many failed" not in _sign_in("wrong").content  # the success started over


def test_a_good_sign_in_below_the_limit_works_and_is_audited(alice, settings):
    settings.STRATA_SIGNIN_FAILURES = 3
    _sign_in("wrong")
    r = _sign_in("right-password-1")
    assert r.status_code == 302 and r["Location"] == "/console/"
    assert AuditEvent.objects.filter(action="sign-in", username="alice", result="ok").exists()


def test_guessed_tokens_are_audited_and_back_off_but_never_lock_anyone_out(alice, settings,
                                                                             viewer_api):
    settings.STRATA_SIGNIN_FAILURES = 2
    client = APIClient(REMOTE_ADDR="10.2.2.2")
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    for _ in range(2):
        assert client.get("/api/v1/pools/").status_code == 401
    r = client.get("/api/v1/pools/")
    assert r.status_code == 401 and "Too many failed sign-ins" in r.json()["detail"]
    assert AuditEvent.objects.filter(action="sign-in failed", remote_addr="10.2.2.2").count() == 2
    assert AuditEvent.objects.filter(action="sign-in throttled", remote_addr="10.2.2.2").exists()
    # a real token from that address works, and so does a password sign-in there
    client.credentials(HTTP_AUTHORIZATION=f"Token {viewer_api.token}")
    assert client.get("/api/v1/pools/").status_code == 200
    assert _sign_in("right-password-1", addr="10.2.2.2").status_code == 302


def test_tokens_are_listed_and_revoked_by_their_owner(viewer_api):
    mine = viewer_api.get("/api/v1/tokens/").json()["results"]
    assert [t["user"] for t in mine] == ["viewer"] and mine[0]["key"] is None
    new = viewer_api.post("/api/v1/tokens/").json()
    assert len(new["key"]) == 40 and new["key"].startswith(new["key_prefix"])
    assert viewer_api.get("/api/v1/pools/").status_code == 401  # the old token was replaced
    viewer_api.credentials(HTTP_AUTHORIZATION=f"Token {new['key']}")
    assert viewer_api.get("/api/v1/pools/").status_code == 200
    assert viewer_api.delete("/api/v1/tokens/viewer/").status_code == 204
    assert viewer_api.get("/api/v1/pools/").status_code == 401


def test_admins_see_and_revoke_every_token_others_only_their_own(api, viewer_api, operator_api):
    users = {t["user"] for t in api.get("/api/v1/tokens/").json()["results"]}
    assert {"viewer", "operator"} <= users
    assert operator_api.delete("/api/v1/tokens/viewer/").status_code == 404
    assert viewer_api.get("/api/v1/pools/").status_code == 200
    assert api.delete("/api/v1/tokens/viewer/").status_code == 204
    assert viewer_api.get("/api/v1/pools/").status_code == 401


def test_a_changed_password_ends_the_users_sessions(api, alice):
    browser = Client()
    assert browser.post("/login/", {"username": "alice",
                                    "password": "right-password-1"}).status_code == 302
    assert browser.get("/api/v1/me/").json()["username"] == "alice"
    r = api.patch("/api/v1/users/alice/", {"password": "a-new-password-2"}, format="json")
    assert r.status_code == 200
    assert browser.get("/api/v1/me/").status_code in (401, 403)
    assert browser.get("/console/").status_code == 302  # back to the sign-in page


def test_the_database_keeps_only_a_digest_of_each_token(viewer_api):
    """Issue 34, high 3: a copy of the database must not hold a usable API token."""
    from django.db import connection

    from plane.models import ApiToken

    new = viewer_api.post("/api/v1/tokens/").json()
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM console_apitoken")
        rows = [" ".join(str(v) for v in row) for row in cur.fetchall()]
    assert rows and not any(new["key"] in row for row in rows)
    stored = ApiToken.objects.get(user__username="viewer")
    assert stored.digest != new["key"] and len(stored.digest) == 64
    viewer_api.credentials(HTTP_AUTHORIZATION=f"Token {new['key']}")
    assert viewer_api.get("/api/v1/pools/").status_code == 200
    viewer_api.credentials(HTTP_AUTHORIZATION=f"Token {stored.digest}")  # the digest is no key
    assert viewer_api.get("/api/v1/pools/").status_code == 401


def test_tokens_made_before_hashing_keep_working_and_lose_their_clear_copy(db):
    """The migration turns each clear key of DRF's table into its digest: a token in use
    (credentials.json, a script) keeps working, and the clear key is gone."""
    import importlib

    from django.apps import apps
    from rest_framework.authtoken.models import Token

    migration = importlib.import_module("plane.migrations.0005_apitoken_hashed")
    old = User.objects.create_user("legacy", password="legacy-password-1")
    key = Token.objects.create(user=old).key
    migration.hash_existing_tokens(apps, None)
    assert not Token.objects.exists()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/me/").json()["username"] == "legacy"
