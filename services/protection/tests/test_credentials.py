"""Credentials of peers and backup targets are visible ASCII (found by the API fuzz test: a
peer token with other characters was a 500 when the plane checked the peer)."""
import pytest

from services.protection.models import BackupTarget, ReplicationPeer

pytestmark = pytest.mark.django_db


def test_a_peer_token_outside_ascii_is_a_400_naming_token(api):
    r = api.post("/api/v1/replication-peers/", {"name": "site-b", "url": "http://127.0.0.1:9/",
                                                "token": "t\u00f6k\u20acn"}, format="json")
    assert r.status_code == 400 and "token" in r.json()["fields"], r.content
    assert not ReplicationPeer.objects.exists()


@pytest.mark.parametrize("field", ["access_key", "secret_key"])
def test_a_backup_target_key_outside_ascii_is_a_400_naming_it(api, field):
    body = {"name": "t1", "endpoint_url": "http://127.0.0.1:9/", "bucket": "b1",
            "access_key": "AKIA", "secret_key": "secret-1", field: "cl\u00e9 secr\u00e8te"}
    r = api.post("/api/v1/backup-targets/", body, format="json")
    assert r.status_code == 400 and field in r.json()["fields"], r.content
    assert not BackupTarget.objects.exists()
