"""A real gateway subprocess on a free port with a temporary config and data root."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager

import boto3
import pytest
from botocore.config import Config

from tests.kit import Gateway

ACCESS, SECRET = "STRATAADMINKEY", "strata-admin-secret"
USER_ACCESS, USER_SECRET = "ALICEKEY", "alice-secret"
ADMIN_TOKEN = "test-admin-token"
SSE_MASTER_KEY = "c3RyYXRhLXRlc3QtbWFzdGVyLWtleS0zMi1ieXRlcyE="   # 32 bytes, base64 (tests only)
BOB, BOB_SECRET = "BOBKEY", "bob-secret"
CAROL, CAROL_SECRET = "CAROLKEY", "carol-secret"
TENANTS = {ACCESS: {"secret_key": SECRET, "user": "admin", "admin": True},
           USER_ACCESS: {"secret_key": USER_SECRET, "user": "alice"},
           BOB: {"secret_key": BOB_SECRET, "user": "bob"},
           CAROL: {"secret_key": CAROL_SECRET, "user": "carol"}}


class GatewayProcess(Gateway):
    """The kit's gateway with an admin and a user (alice), the admin token, domain
    ``localhost`` and an SSE master key; ``client()`` is a boto3 client of the admin (or of given keys)."""

    def __init__(self, workdir: str, **settings):
        super().__init__(workdir, {
            ACCESS: {"secret_key": SECRET, "user": "admin", "admin": True},
            USER_ACCESS: {"secret_key": USER_SECRET, "user": "alice", "admin": False},
        }, admin_token=ADMIN_TOKEN, **{"domains": ["localhost"], "sse_master_key": SSE_MASTER_KEY, **settings})

    @classmethod
    @contextmanager
    def running(cls, workdir: str | None = None, **settings):
        """A started gateway in ``workdir`` (a new temporary directory if None), stopped and
        its directory removed afterwards."""
        workdir = workdir or tempfile.mkdtemp(prefix="strata-test-")
        gw = cls(workdir, **settings)
        try:
            gw.start()
            yield gw
        finally:
            gw.stop()
            shutil.rmtree(workdir, ignore_errors=True)

    def client(self, access=ACCESS, secret=SECRET, **config):
        config.setdefault("max_pool_connections", 64)
        cfg = Config(s3={"addressing_style": config.pop("addressing_style", "path")}, signature_version="s3v4",
                     retries={"max_attempts": 1}, **config)
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=access,
                            aws_secret_access_key=secret, region_name="us-east-1", config=cfg,
                            verify=self.tls[0] if self.tls else None)  # HTTPS: its certificate is the CA


# The multi-tenant gateway of the policy and routing tests: an admin and three users (alice,
# bob, carol), one gateway per test module. A module uses them with
# ``from services.object.tests.gatewayproc import alice, bob, gw  # noqa: F401 (fixtures)``.
@pytest.fixture(scope="module")
def gw():
    """A started gateway whose users are TENANTS; stopped and deleted after the module."""
    workdir = tempfile.mkdtemp(prefix="strata-tenants-")
    g = GatewayProcess(workdir)
    g.write_config(TENANTS)
    try:
        g.start()
        yield g
    finally:
        g.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def alice(gw):
    return gw.client(USER_ACCESS, USER_SECRET)


@pytest.fixture(scope="module")
def bob(gw):
    return gw.client(BOB, BOB_SECRET)


@pytest.fixture(scope="module")
def carol(gw):
    return gw.client(CAROL, CAROL_SECRET)
