"""CHAP secrets are sealed in the database (issue 34, high 3): a copy of the database does
not give the secret, and tgtd still gets it to check initiators' logins."""
import importlib
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection

from services.block.models import Host
from services.block.tests.planefixtures import (  # noqa: F401  (fixtures)
    CLIENT,
    SECRET,
    block_daemons,
    iscsi_tool,
    make_volume,
    post,
)

pytestmark = pytest.mark.django_db

MUTUAL = "target-secret-9"


def _stored(table, column, name):
    with connection.cursor() as cur:
        cur.execute(f"SELECT {column} FROM {table} WHERE name = %s", [name])
        return cur.fetchone()[0]


def test_chap_secrets_are_sealed_at_rest_and_initiators_still_log_in(api, block):
    make_volume(api, "v1")
    post(api, "/api/v1/hosts/", {"name": "client1", "iqn": CLIENT, "chap_user": "client1",
                                 "chap_secret": SECRET})
    post(api, "/api/v1/host-groups/", {"name": "hg1", "hosts": ["client1"],
                                       "mutual_chap_user": "target1",
                                       "mutual_chap_secret": MUTUAL})
    exp = post(api, "/api/v1/block-exports/", {"volume": "v1", "protocol": "iscsi",
                                               "host_group": "hg1"})
    assert exp["state"] == "online", exp
    host_secret = _stored("block_host", "chap_secret", "client1")
    group_secret = _stored("block_hostgroup", "mutual_chap_secret", "hg1")
    assert SECRET not in host_secret and MUTUAL not in group_secret
    assert host_secret and group_secret
    # the initiator with the right secret logs in (tgtd was given the unsealed secret) ...
    inq = iscsi_tool("iscsi-inq", exp)
    assert inq.returncode == 0 and "DIRECT_ACCESS" in inq.stdout, inq.stderr
    # ... and the sealed text is no secret
    assert iscsi_tool("iscsi-inq", exp, secret=host_secret[:16]).returncode != 0


def test_chap_secrets_stored_in_clear_before_are_sealed_by_the_migration(api):
    post(api, "/api/v1/hosts/", {"name": "old", "iqn": CLIENT, "chap_user": "old",
                                 "chap_secret": SECRET})
    with connection.cursor() as cur:  # as an install before sealing had it
        cur.execute("UPDATE block_host SET chap_secret = %s WHERE name = 'old'", [SECRET])
    migration = importlib.import_module("services.block.migrations.0003_sealed_chap_secrets")
    migration.seal_rows(apps, SimpleNamespace(connection=connection))
    assert SECRET not in _stored("block_host", "chap_secret", "old")
    assert Host.objects.get(name="old").chap_secret == SECRET
