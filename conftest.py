"""Fixtures shared by the whole suite: a private data directory (pools in it are torn down,
loops detached, even on failure), API clients per role, and a real Celery worker."""
import tempfile
from pathlib import Path

import pytest

from tests import cleanup_leftovers
from tests.ceph import ceph_cluster, stop_shared_cluster  # noqa: F401  (the fixture, suite-wide)
from tests.spdk_support import blank_target, spdk_target, stop_shared_target  # noqa: F401  (suite-wide)


def pytest_configure(config):
    from django.conf import settings

    # Django's advice for test suites: a fast password hasher. PBKDF2 takes about 1 s per
    # password on a 2-core test machine, and every `api` fixture makes a user; the appliance
    # that `strata up` starts (tests/appliance.py) keeps the real one
    if settings.configured:  # not under `-p no:django` (the gateway's tests need no Django)
        settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report shows what its fixtures can tell of the failure (a cluster's
    logs: tests/cluster_support.Cluster.failure_context), since CI keeps only the report."""
    report = (yield).get_result()
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            context = getattr(value, "failure_context", None)
            if callable(context):
                try:
                    report.sections.append((f"{name}: logs", context()))
                except Exception as exc:        # a report, not a second failure
                    report.sections.append((f"{name}: logs", f"(not read: {exc})"))


def pytest_sessionfinish(session, exitstatus):
    stop_shared_cluster()
    stop_shared_target()


@pytest.fixture
def data_dir(settings):
    """A fresh data directory for the plane; its pools are unmounted and detached after."""
    path = Path(tempfile.mkdtemp(prefix="strata-test-"))
    settings.DATA_DIR = path
    yield path
    cleanup_leftovers.release_data_dir(path)


def _client_for(user):
    """An API client signed in with a new token of ``user``; ``client.token`` is its key
    (the plane keeps only the digest)."""
    from rest_framework.test import APIClient

    from plane.tokens import issue

    client = APIClient()
    client.token = issue(user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {client.token}")
    client.user = user
    return client


def _user(username, role):
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(username, password="pw-" + username + "-123")
    if role == "admin":
        user.is_superuser = user.is_staff = True
        user.save()
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def api(db, data_dir):
    """An admin API client (token auth)."""
    return _client_for(_user("admin", "admin"))


@pytest.fixture
def viewer_api(db, data_dir):
    return _client_for(_user("viewer", "viewer"))


@pytest.fixture
def operator_api(db, data_dir):
    return _client_for(_user("operator", "operator"))


def fresh_queue() -> None:
    """No message for a worker but the test's own: purge the queue, and forget the messages
    killed workers left unacknowledged (acks_late), which the broker hands out again after
    its visibility timeout (an hour) to whatever worker starts then, with Job ids of another
    test that may be this test's ids (seen: a stale replication run discarding the transfer
    of this test's run)."""
    import redis
    from django.conf import settings

    from plane.celery import app

    app.control.purge()
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(
        "unacked", "unacked_index", "unacked_mutex")


@pytest.fixture
def worker(transactional_db):
    """A real Celery worker (in a thread) consuming the test broker."""
    from celery.contrib.testing.worker import start_worker

    from plane.celery import app

    fresh_queue()
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        yield app


@pytest.fixture(scope="session")
def guest_image(tmp_path_factory):
    """A guest kernel and busybox initramfs (tests/guest.py), built once per test session
    under the session's temporary directory; skips when qemu or the kernel is missing."""
    return _guest_image(tmp_path_factory)


@pytest.fixture(scope="module")
def own_guest_image(tmp_path_factory):
    """The same, built for one module of the ceph group (the session's ``guest_image``
    belongs to the guest group, tests/parallel.py): a module whose guests are clients of the
    Ceph cluster asks for this one."""
    return _guest_image(tmp_path_factory)


def _guest_image(tmp_path_factory):
    from tests import guest

    why = guest.missing()
    if why:
        pytest.skip(f"guest tests need {why}")
    return guest.Image.build(tmp_path_factory.mktemp("guest"))
