"""The whole REST API fuzzed from its own OpenAPI schema (schemathesis): a live plane with a
real worker answers every generated request without a 5xx, with a status the schema
documents and a body that matches the schema. Bounded examples per operation keep it short.
"""
import json
import tempfile
from pathlib import Path

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests import cleanup_leftovers

# Operations left out, each because it would reach outside this machine or touch real disks.
EXCLUDED = {
    ("POST", "/api/v1/pools/"): "formats the block devices it names (fuzzed names could be "
                                "real disks); pools are covered by the storage and dataplane "
                                "tests with image devices",
    ("POST", "/api/v1/replication-peers/"): "contacts the peer appliance at the URL it is given",
    ("PUT", "/api/v1/replication-peers/{name}/"): "contacts the peer appliance",
    ("PATCH", "/api/v1/replication-peers/{name}/"): "contacts the peer appliance",
    ("POST", "/api/v1/backup-targets/"): "contacts the S3 endpoint it is given",
    ("PUT", "/api/v1/backup-targets/{name}/"): "contacts the S3 endpoint",
    ("PATCH", "/api/v1/backup-targets/{name}/"): "contacts the S3 endpoint",
    ("POST", "/api/v1/tokens/"): "replaces the token this test runs with "
                                 "(console/tests/test_signin.py covers it)",
}

# Every check of schemathesis runs but this one: a schema cannot say which names exist, so a
# well-formed body naming a pool or file system that does not exist is rightly a 400.
NOT_CHECKED = [positive_data_acceptance]


def _schema() -> dict:
    spec = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(spec, renderer_context={}))


schema = schemathesis.openapi.from_dict(_schema())


@pytest.fixture(scope="module")
def plane(live_server, django_db_setup, django_db_blocker):
    """A live plane for every operation of this module: its own data directory, an admin
    token and a real Celery worker (in a thread). State accumulates across operations, as on
    a real appliance; the database is flushed at the end for the tests after this one."""
    from celery.contrib.testing.worker import start_worker
    from django.conf import settings as django_settings
    from django.contrib.auth.models import Group, User
    from django.core.management import call_command

    from conftest import fresh_queue
    from plane.celery import app
    from plane.tokens import issue

    data_dir, old_data_dir = Path(tempfile.mkdtemp(prefix="strata-test-")), django_settings.DATA_DIR
    django_settings.DATA_DIR = data_dir
    with django_db_blocker.unblock():
        user = User.objects.create_superuser("fuzz-admin", password="fuzz-password-1")
        user.groups.add(Group.objects.get_or_create(name="admin")[0])
        token = issue(user)
        fresh_queue()
        try:
            with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
                yield {"url": live_server.url, "token": token}
        finally:
            call_command("flush", interactive=False, verbosity=0)
            cleanup_leftovers.release_data_dir(data_dir)
            django_settings.DATA_DIR = old_data_dir


@schema.parametrize()
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api(case, plane):
    if (case.method.upper(), case.path) in EXCLUDED:
        pytest.skip(EXCLUDED[(case.method.upper(), case.path)])
    case.call_and_validate(base_url=plane["url"], excluded_checks=NOT_CHECKED,
                           headers={"Authorization": f"Token {plane['token']}"})
