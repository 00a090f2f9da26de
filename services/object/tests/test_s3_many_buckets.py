"""Many buckets on a gateway with few file descriptors: every bucket keeps working.

Each bucket's index is several SQLite shards, each holding a few open files while in use; a
gateway serving hundreds of buckets must close idle ones instead of failing with "Too many
open files" (it used to keep about 40 descriptors per bucket open for ever)."""
from __future__ import annotations

import hashlib
import os

from services.object.tests.gatewayproc import GatewayProcess

BUCKETS = 120          # about 4,800 descriptors at 40 per bucket: ten times the limit below
NOFILE = 512


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_hundreds_of_buckets_within_a_small_descriptor_limit():
    with GatewayProcess.running(nofile=NOFILE) as gw:
        s3 = gw.client(max_pool_connections=8)
        bodies = {}
        for i in range(BUCKETS):
            name = f"many-{i:03d}"
            s3.create_bucket(Bucket=name)
            for key in ("a/one", "b/two", "c/three"):   # different keys, different shards
                body = os.urandom(1000 + i) + name.encode() + key.encode()
                s3.put_object(Bucket=name, Key=key, Body=body)
                bodies[name, key] = hashlib.sha256(body).hexdigest()
        assert _open_files(gw.proc.pid) < NOFILE

        for (name, key), digest in bodies.items():   # every bucket again, oldest first
            got = s3.get_object(Bucket=name, Key=key)["Body"].read()
            assert hashlib.sha256(got).hexdigest() == digest, (name, key)
        for i in range(BUCKETS):
            listed = s3.list_objects_v2(Bucket=f"many-{i:03d}")
            assert [o["Key"] for o in listed["Contents"]] == ["a/one", "b/two", "c/three"]
        s3.delete_object(Bucket="many-000", Key="a/one")
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="many-000")["Contents"]] == ["b/two", "c/three"]
        assert len(s3.list_buckets()["Buckets"]) == BUCKETS
