"""Running the suite on two pytest-xdist workers (`tests/run_suite.py` passes ``-n``).

Loaded early by pyproject's ``-p tests.parallel``, before pytest-django imports the settings:

- each worker gets a Redis database of its own (the run's STRATA_REDIS_URL plus the worker's
  index), so one worker's Celery worker never takes a task another worker's test queued;
- a worker's tests go to it a module at a time (its module-scoped fixtures, such as an
  appliance, start once), and the tests that use the cluster's nspawn hosts, the Ceph cluster, the guest
  kernel or the SPDK target (session fixtures) go as one group each to one worker, so each is built once;
- the groups are handed out first, so that the longest pieces of work do not start last;
- every test has an id of its own (the scheduler runs one test per id);
- a failure is printed the moment it is reported, with the time: a run stopped from outside
  (CI's time limit) never reaches pytest's summary, and its log still names what failed.

PostgreSQL needs nothing here: pytest-django gives each worker its own test database.
"""
from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from tests.kit import xdist_worker

# The groups, longest first: a group's tests are those in the modules whose names start so,
# and every test that uses the group's session fixture must be in one of them (the scheduler
# in the controller sees only test ids; xdist's own `loadgroup` marks do not reach it under
# pytest 9, which no longer takes the node id xdist rewrites).
GROUPS = (("cluster", "test_cluster_", "cluster_hosts"), ("ceph", "test_ceph", "ceph_cluster"),
          ("guest", "test_vm_", "guest_image"), ("spdk", "test_spdk", "spdk_target"))
UNSCHEDULABLE = pytest.StashKey[str]()


def group_of(nodeid: str) -> str | None:
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return next((name for name, prefix, _ in GROUPS if module.startswith(prefix)), None)


def _own_redis_database() -> None:
    url = os.environ.get("STRATA_REDIS_URL", "")
    base, _, db = url.rpartition("/")
    index, _ = xdist_worker()
    if index and base.startswith("redis://") and db.isdigit():
        os.environ["STRATA_REDIS_URL"] = f"{base}/{int(db) + index}"


_own_redis_database()


def _unique_ids(items) -> None:
    """The scheduler knows a test by its id and runs one test of each id: schemathesis names its
    tests per API operation (``test_api[GET /api/v1/pools/]``), but pytest 9 builds the id from
    the function's name alone, so test_api_fuzz's 204 tests shared one id and, on xdist, one ran.
    Such tests get their id from their name; a test whose id is still shared fails."""
    count = Counter(item.nodeid for item in items)
    for item in items:
        if count[item.nodeid] > 1:
            name, _, params = item.name.partition("[")
            item._id = item.parent.id.child(name).with_params(params.removesuffix("]") or None)
    count = Counter(item.nodeid for item in items)
    for item in items:
        if count[item.nodeid] > 1:
            item.stash[UNSCHEDULABLE] = f"{item.nodeid}: {count[item.nodeid]} tests have this id"


def pytest_collection_modifyitems(items):
    _unique_ids(items)
    for item in items:
        for name, prefix, fixture in GROUPS:
            if fixture in item.fixturenames and group_of(item.nodeid) != name:
                item.stash[UNSCHEDULABLE] = (f"{item.nodeid} uses {fixture}: its module's name "
                                             f"must start with {prefix} (tests/parallel.py)")
    rank = {name: i for i, (name, _, _) in enumerate(GROUPS)}
    items.sort(key=lambda item: rank.get(group_of(item.nodeid), len(rank)))  # stable: the rest as found


def pytest_runtest_setup(item):
    if UNSCHEDULABLE in item.stash:
        pytest.fail(item.stash[UNSCHEDULABLE], pytrace=False)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleOrGroup(LoadScopeScheduling):
        """A unit of work is a module, or a whole group of modules."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # keep the order above

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or nodeid.split("::", 1)[0]

    return ModuleOrGroup(config, log)


_config = []  # the controller's


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _config.append(config)


def pytest_runtest_logreport(report):
    """One line per failed test as it happens (in the controller; a worker's output is not
    shown): the time, the phase unless the test itself, the id and the first line of why."""
    terminal = _config and _config[0].pluginmanager.getplugin("terminalreporter")
    if not report.failed or not terminal:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    why = (crash.message if crash else str(report.longrepr)).strip().splitlines() or [""]
    what = "FAILED" if report.when == "call" else f"ERROR at {report.when} of"
    terminal.write_line(f"\n{time.strftime('%H:%M:%S')} {what} {report.nodeid} after "
                        f"{report.duration:.0f} s: {why[0][:200]}")
