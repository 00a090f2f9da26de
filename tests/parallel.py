"""Running the suite on two pytest-xdist workers (`tests/run_suite.py` passes ``-n``).

Loaded early by pyproject's ``-p tests.parallel``, before pytest-django imports the settings:

- each worker gets a Redis database of its own (the run's STRATA_REDIS_URL plus the worker's
  index), so one worker's Celery worker never takes a task another worker's test queued;
- a worker's tests go to it a module at a time (its module-scoped fixtures, such as an
  appliance, start once), and the tests that use the Ceph cluster or the guest kernel (session
  fixtures, expensive to build) go as one group each to one worker, so each is built once;
- the groups are handed out first, so that the longest pieces of work do not start last.

PostgreSQL needs nothing here: pytest-django gives each worker its own test database.
"""
from __future__ import annotations

import os

import pytest

# the session fixtures that make a group of the tests that use them, longest first
GROUPS = {"ceph_cluster": "ceph", "guest_image": "guest"}


def worker_index() -> int:
    """0 for the first xdist worker (and without xdist), 1 for the second..."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw"))


def _own_redis_database() -> None:
    url = os.environ.get("STRATA_REDIS_URL", "")
    base, _, db = url.rpartition("/")
    if worker_index() and base.startswith("redis://") and db.isdigit():
        os.environ["STRATA_REDIS_URL"] = f"{base}/{int(db) + worker_index()}"


_own_redis_database()


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the marks
def pytest_collection_modifyitems(items):
    rank = {}
    for item in items:
        group = next((g for f, g in GROUPS.items() if f in item.fixturenames), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        rank[item.nodeid] = list(GROUPS.values()).index(group) if group else len(GROUPS)
    items.sort(key=lambda item: rank[item.nodeid])  # stable: the rest as found


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrGroup(LoadScopeScheduling):
        """A unit of work is a module, or a whole ``xdist_group`` (its name follows '@')."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # keep the order above

        def _split_scope(self, nodeid: str) -> str:
            if nodeid.rfind("@") > nodeid.rfind("]"):
                return nodeid.rsplit("@", 1)[1]
            return nodeid.split("::", 1)[0]

    return ModuleOrGroup(config, log)

