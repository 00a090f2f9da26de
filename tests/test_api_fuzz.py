"""The whole REST API fuzzed from its own OpenAPI schema (schemathesis): a live plane with a
real worker answers every generated request without a 5xx, with a status the schema
documents and a body that matches the schema, and refuses what the schema says is invalid.

Two tests:

- ``test_api``: every operation alone, from its examples, the coverage phase (boundary and
  invalid values of every parameter and field: empty strings, fractions for integers, wrong
  types, missing required fields) and a few random cases, positive and negative;
- ``test_api_workflows``: operations chained through the links schemathesis infers from the
  schema (a POST's answer feeds the GET, PATCH and DELETE of what it made), so that what a
  made object answers is checked too, and that a deleted one is gone.

Every operation runs. The few that would reach outside this machine or cut this test off are
made safe instead of left out (see ``make_safe``). Bounded examples keep the run short.
"""
import json
import tempfile
from pathlib import Path

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import ServerError
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests import cleanup_leftovers

ADMIN = "fuzz-admin"
# a closed port on this machine: a peer or an S3 endpoint there is refused at once
NOWHERE = "http://127.0.0.1:9/"

# Every check of schemathesis runs but these: a schema cannot say which names exist, so a
# well-formed body naming a pool or file system that does not exist is rightly a 400
# (positive_data_acceptance); and a 5xx is checked by no_server_fault below instead.
# negative_data_rejection (invalid input must not be accepted) does run.
NOT_CHECKED = [positive_data_acceptance, not_a_server_error]
# The one service this plane does not run: the S3 gateway (its 503 says so). Any other 5xx
# is a failure, a 503 included (e.g. a daemon refusing what validation should have refused).
NOT_RUNNING_HERE = {"gateway_unavailable"}


def no_server_fault(ctx, response, case):
    """No 5xx, but the 503 of a service that this test does not start."""
    if response.status_code < 500:
        return None
    try:
        code = response.json().get("error")
    except (ValueError, AttributeError):
        code = None
    if response.status_code == 503 and code in NOT_RUNNING_HERE:
        return None
    raise ServerError(operation=case.operation.label, status_code=response.status_code)


def _schema() -> dict:
    spec = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(spec, renderer_context={}))


schema = schemathesis.openapi.from_dict(_schema())
schema.config.phases.stateful.max_steps = 6


def make_safe(case, plane: dict) -> None:
    """Keep a generated request on this machine and this test's admin, changing nothing a
    check looks at: pools are made by the directory driver (it never opens a block device, so
    a fuzzed device path is refused, not formatted); replication peers and backup targets
    point at a closed local port; this test's own user and token are not deleted or changed
    (another user's are)."""
    method, path, body = case.method.upper(), case.path, case.body
    if (method, path) == ("POST", "/api/v1/pools/") and isinstance(body, dict):
        if body.get("driver") in (None, "local", "spdk", "ceph"):
            body["driver"] = "directory"
    for field, prefix in (("url", "/api/v1/replication-peers/"),
                          ("endpoint_url", "/api/v1/backup-targets/")):
        if path.startswith(prefix) and isinstance(body, dict) and isinstance(body.get(field), str):
            body[field] = NOWHERE
    params = case.path_parameters or {}
    if path in ("/api/v1/users/{username}/", "/api/v1/tokens/{username}/") \
            and method != "GET" and params.get("username") == ADMIN:
        params["username"] = "someone-else"


def after_call(case, response, plane: dict) -> None:
    """POST /tokens/ replaces the caller's token: go on with the new one."""
    if (case.method.upper(), case.path) == ("POST", "/api/v1/tokens/") \
            and response.status_code == 201:
        plane["token"] = response.json()["key"]


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
        user = User.objects.create_superuser(ADMIN, password="fuzz-password-1")
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


def _headers(plane: dict) -> dict:
    return {"Authorization": f"Token {plane['token']}"}


@schema.parametrize()
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api(case, plane):
    make_safe(case, plane)
    response = case.call(base_url=plane["url"], headers=_headers(plane))
    after_call(case, response, plane)
    case.validate_response(response, excluded_checks=NOT_CHECKED,
                           additional_checks=[no_server_fault], headers=_headers(plane),
                           transport_kwargs={"base_url": plane["url"],
                                             "headers": _headers(plane)})


def test_api_workflows(plane):
    """Chains of linked operations (create, then read, change, delete what was made)."""

    class Workflow(schema.as_state_machine()):
        def before_call(self, case):
            make_safe(case, plane)

        def get_call_kwargs(self, case):
            return {"base_url": plane["url"], "headers": _headers(plane)}

        def after_call(self, response, case):
            super().after_call(response, case)
            after_call(case, response, plane)

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, excluded_checks=NOT_CHECKED,
                                   additional_checks=[no_server_fault],
                                   headers=_headers(plane), transport_kwargs=kwargs,
                                   recorder=getattr(self, "recorder", None))

    Workflow.run(settings=settings(max_examples=40, stateful_step_count=6, deadline=None,
                                   derandomize=True, suppress_health_check=list(HealthCheck)))
