"""The development Ceph cluster for tests: one per test session, started on first use.

Use the ``ceph_cluster`` fixture (registered for the whole suite by the root conftest.py),
or, where a fixture cannot be asked for (driver factories), :func:`shared_cluster`. Both
return a started :class:`dataplane.ceph.devcluster.DevCluster` (``conf``, ``keyring``,
``client``, ``command()``, ``kill_osd()``, ``start_osd()``, ``wait_healthy()``); it is
stopped and deleted when the session ends. Tests that kill an OSD start it again and wait
for HEALTH_OK before they return, so the next test finds a healthy cluster.

The cluster listens on :data:`CEPH_ADDRESS`, a private address of this host added to ``lo``
(labelled ``lo:strata-ceph``), not on 127.0.0.1: a 127.x address cannot be reached from another
network namespace, and the clients of some tests live in one (TCG guests with a kernel Ceph
client, the cluster's nspawn hosts), while any other address of ``lo`` is this host's own to
them too (the kernel here has no dummy interfaces). The address is added on first use and left
in place (several test sessions may share it).
"""
import atexit
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager

import pytest

_cluster = None
CEPH_ADDRESS = "10.78.0.1"


def ceph_address() -> str:
    """:data:`CEPH_ADDRESS`, added to ``lo`` when missing."""
    shown = subprocess.run(["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True,
                           text=True, check=True)
    if f" {CEPH_ADDRESS}/" not in shown.stdout:
        added = subprocess.run(["ip", "addr", "add", f"{CEPH_ADDRESS}/32", "dev", "lo", "label",
                                "lo:strata-ceph"], capture_output=True, text=True)
        if added.returncode != 0 and "File exists" not in added.stderr:
            raise RuntimeError(f"cannot add {CEPH_ADDRESS} to lo: {added.stderr.strip()}")
    return CEPH_ADDRESS


def ceph_unavailable() -> str | None:
    """Why the development cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "the Ceph development cluster needs root"
    for tool in ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds", "monmaptool"):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh installs the ceph packages)"
    try:
        import rados  # noqa: F401
        import rbd  # noqa: F401
    except ImportError:
        return "python3-rados/python3-rbd are not linked into the venv (run scripts/setup.sh)"
    return None


def shared_cluster():
    """The session's development cluster, started on the first call (skips without Ceph)."""
    global _cluster
    why = ceph_unavailable()
    if why:
        pytest.skip(why)
    if _cluster is None:
        # the cluster's modules run below the test suite: import on use, not at collection
        from dataplane.ceph.devcluster import DevCluster

        root = tempfile.mkdtemp(prefix="strata-test-ceph-")
        cluster = DevCluster(root, address=ceph_address())
        try:
            cluster.up()
        except BaseException:
            cluster.destroy()
            raise
        _cluster = cluster
        atexit.register(stop_shared_cluster)
    return _cluster


def stop_shared_cluster() -> None:
    """Stop and delete the session's cluster (called when the session ends)."""
    global _cluster
    if _cluster is not None:
        cluster, _cluster = _cluster, None
        from dataplane.ceph import cephfs as ceph_fs

        ceph_fs.close_all()  # while the cluster answers (see close_all)
        cluster.destroy()


@pytest.fixture(scope="session")
def ceph_cluster():
    """A healthy development Ceph cluster (mon, mgr, 3 OSDs under hosts host0..2, 2 MDS)."""
    return shared_cluster()


def ceph_pool_body(cluster, name: str, **extra) -> dict:
    """The body of ``POST /api/v1/pools/`` for ceph pool ``name`` on ``cluster``."""
    return {"name": name, "driver": "ceph", "ceph_conf": str(cluster.conf),
            "ceph_client": cluster.client, **extra}


@contextmanager
def driver_pool(cluster, pool: str, tag: str, redundancy: str = "replicated:3",
                failure_domain: str = "host"):
    """(driver, pool) of a ceph pool (by default replicated:3 spread over the cluster's
    hosts) with a state directory of its own; RADOS pools are prefixed with ``tag`` and made
    unique per run. Everything in it is deleted after."""
    from dataplane.ceph.driver import CephDriver  # loads librados: only once a cluster is running
    from tests.dataplane_support import teardown_state_dir

    state = tempfile.mkdtemp(prefix="strata-test-")
    drv = CephDriver(state, ceph_conf=str(cluster.conf), client=cluster.client,
                     pool_prefix=f"{tag}{os.getpid()}-{os.path.basename(state)[-6:]}.")
    try:
        drv.create_pool(pool, [], redundancy=redundancy, failure_domain=failure_domain)
        yield drv, pool
    finally:
        teardown_state_dir(drv, state)


@contextmanager
def plane_ceph_pool(api, cluster, name: str):
    """Ceph pool ``name`` (replicated:3 over the cluster's hosts) made through the API; its
    file systems and RADOS pools are deleted after, through the plane's own driver."""
    from services.storage.drivers import driver_for   # Django: only in tests that use it

    made = api.post("/api/v1/pools/", ceph_pool_body(cluster, name, redundancy="replicated:3",
                                                     failure_domain="host"), format="json")
    assert made.status_code == 201, made.json()
    try:
        yield made.json()
    finally:
        drv = driver_for("ceph")   # the plane's own driver instance
        for fs_name in drv.list_filesystems(name):
            drv.delete_filesystem(name, fs_name)
        drv.destroy_pool(name)
        # a client that held capabilities on what was deleted (a stopped Ganesha's) warns
        # until the MDS lets it go: the next test finds the cluster healthy
        cluster.wait_healthy()
