"""Roles, audit log, health, OpenAPI and the error format of the management plane."""
import pytest
from django.test import Client

from console.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_health_answers_without_auth_with_each_component(data_dir):
    r = Client().get("/api/v1/health")
    assert r.status_code == 200
    body = r.json()
    assert body["components"]["database"]["state"] == "ok"
    assert body["components"]["redis"]["state"] == "ok"
    assert body["components"]["worker"]["state"] in ("ok", "error")  # no worker in this test
    assert "pools" in body


def test_api_needs_a_token():
    r = Client().get("/api/v1/pools/")
    assert r.status_code in (401, 403)
    assert r.json()["error"] in ("not_authenticated", "authentication_failed")


def test_viewer_reads_but_cannot_change_and_is_audited(viewer_api):
    assert viewer_api.get("/api/v1/pools/").status_code == 200
    r = viewer_api.post("/api/v1/filesystems/", {"name": "x"}, format="json")
    assert r.status_code == 403 and r.json()["error"] == "permission_denied"
    event = AuditEvent.objects.get()
    assert (event.username, event.method, event.result) == ("viewer", "POST", "denied")
    assert event.path == "/api/v1/filesystems/"


def test_only_admins_manage_users(api, operator_api):
    r = operator_api.post("/api/v1/users/", {"username": "eve", "password": "secret-pw-1",
                                             "role": "admin"}, format="json")
    assert r.status_code == 403
    r = api.post("/api/v1/users/", {"username": "bob", "password": "secret-pw-1",
                                    "role": "operator"}, format="json")
    assert r.status_code == 201 and r.json()["role"] == "operator"
    assert "password" not in r.json()
    audit = api.get("/api/v1/audit/?username=admin").json()["results"]
    assert audit[0]["detail"]["request"]["password"] == "***"
    assert audit[0]["result"] == "ok"


def test_validation_errors_are_json_with_fields(api):
    r = api.post("/api/v1/filesystems/", {"name": "-bad-"}, format="json")
    assert r.status_code == 400
    body = r.json()
    assert body["error"] == "invalid" and "name" in body["fields"] and body["detail"]


def test_openapi_schema_describes_every_resource(api):
    r = api.get("/api/v1/schema/?format=json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    for p in ("/api/v1/pools/", "/api/v1/filesystems/", "/api/v1/volumes/",
              "/api/v1/snapshots/", "/api/v1/jobs/{id}/", "/api/v1/audit/",
              "/api/v1/pools/{name}/scrub/", "/api/v1/volumes/{name}/resize/"):
        assert p in paths
    assert api.get("/api/v1/docs/").status_code == 200
