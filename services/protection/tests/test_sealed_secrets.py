"""Secrets at rest: a replication peer's token and a backup target's secret key are sealed in
the database (the raw column never holds them), the API never returns them, a backup to the
target and a replication to the peer still work with them, and the migration seals rows
stored in plain text before it."""
import hashlib
import os

import pytest
from django.db import connection

from services.protection.models import BackupTarget, ReplicationPeer
from services.protection.tests.s3gateway import ACCESS, SECRET, S3Gateway
from services.storage.models import Volume
from tests.kit import run_job

pytestmark = [pytest.mark.root, pytest.mark.django_db(transaction=True)]
MiB = 1 << 20


def raw(table: str, column: str, name: str) -> str:
    with connection.cursor() as cur:
        cur.execute(f"SELECT {column} FROM {table} WHERE name = %s", [name])
        return cur.fetchone()[0]


@pytest.fixture
def gateway(tmp_path):
    gw = S3Gateway(str(tmp_path)).start()
    try:
        gw.client().create_bucket(Bucket="backups")
        yield gw
    finally:
        gw.stop()


def test_secrets_are_sealed_at_rest_and_still_used(api, worker, gateway, live_server):
    for pool in ("p1", "p2"):
        r = api.post("/api/v1/pools/", {"name": pool, "driver": "local",
                                        "devices": ["image:400M"]}, format="json")
        assert r.status_code == 201, r.json()
    vol = api.post("/api/v1/volumes/", {"name": "vm", "pool": "p1", "size_bytes": 16 * MiB},
                   format="json").json()
    with open(vol["path"], "r+b") as fh:
        fh.write(os.urandom(2 * MiB))

    r = api.post("/api/v1/backup-targets/", {
        "name": "s3", "endpoint_url": gateway.endpoint, "access_key": ACCESS,
        "secret_key": SECRET, "bucket": "backups"}, format="json")
    assert r.status_code == 201 and "secret_key" not in r.json(), r.json()
    sealed = raw("protection_backuptarget", "secret_key", "s3")
    assert SECRET not in sealed and sealed.startswith("gAAAA"), sealed   # a Fernet token
    assert BackupTarget.objects.get(name="s3").secret_key == SECRET
    assert "secret_key" not in api.get("/api/v1/backup-targets/s3/").json()

    token = api.token
    r = api.post("/api/v1/replication-peers/", {"name": "b", "url": live_server.url,
                                                "token": token}, format="json")
    assert r.status_code == 201 and r.json()["state"] == "online", r.json()
    assert token not in raw("protection_replicationpeer", "token", "b")
    assert ReplicationPeer.objects.get(name="b").token == token
    assert "token" not in api.get("/api/v1/replication-peers/b/").json()
    # a row saved again (state recorded by a check) keeps its secret sealed and usable
    assert api.post("/api/v1/replication-peers/b/check/").status_code == 200
    assert token not in raw("protection_replicationpeer", "token", "b")

    # the sealed secrets still work: a backup signs with the key, a replication sends the token
    r = api.post("/api/v1/backups/", {"name": "vm-s3", "volume": "vm", "target": "s3"},
                 format="json")
    assert r.status_code == 201, r.json()
    job = run_job(api, "/api/v1/backups/vm-s3/run/")
    assert job["state"] == "succeeded", job
    r = api.post("/api/v1/replications/", {"name": "vm-dr", "volume": "vm", "peer": "b",
                                           "target_pool": "p2", "target_name": "vm-replica"},
                 format="json")
    assert r.status_code == 201, r.json()
    job = run_job(api, "/api/v1/replications/vm-dr/sync/")
    assert job["state"] == "succeeded", job
    replica = Volume.objects.get(name="vm-replica")
    with open(os.path.join(os.path.dirname(replica.path), ".snapshots",
                           job["result"]["snapshot"], "data"), "rb") as a, \
            open(vol["path"], "rb") as b:
        assert hashlib.sha256(a.read()).digest() == hashlib.sha256(b.read()).digest()


def test_migration_seals_rows_stored_in_plain_text():
    from django.db.migrations.executor import MigrationExecutor

    before, after = ("protection", "0004_replication_failback"), ("protection", "0005_sealed_secrets")
    executor = MigrationExecutor(connection)
    executor.migrate([before])
    try:
        with connection.cursor() as cur:
            cur.execute("INSERT INTO protection_replicationpeer (name, url, token, state, error, "
                        "remote_user, created_at) VALUES ('old', 'http://x', 'plain-token', "
                        "'online', '', '', now())")
            cur.execute("INSERT INTO protection_backuptarget (name, endpoint_url, region, "
                        "access_key, secret_key, bucket, prefix, created_at) VALUES ('old', "
                        "'http://x', 'us-east-1', 'AK', 'plain-secret', 'b', '', now())")
        executor = MigrationExecutor(connection)
        executor.migrate([after])
        assert "plain-token" not in raw("protection_replicationpeer", "token", "old")
        assert "plain-secret" not in raw("protection_backuptarget", "secret_key", "old")
        assert ReplicationPeer.objects.get(name="old").token == "plain-token"
        assert BackupTarget.objects.get(name="old").secret_key == "plain-secret"
        executor = MigrationExecutor(connection)
        executor.migrate([before])        # reversible: back to plain text
        assert raw("protection_replicationpeer", "token", "old") == "plain-token"
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
