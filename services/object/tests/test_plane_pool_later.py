"""`strata up --s3-pool POOL` while POOL does not exist: S3 waits (the launcher waits for its
gate) and starts, without a restart, once POOL is created (the periodic ``object.open_gate``,
``bootstrap.open_gate_when_attached``); the admin's S3 key lands in credentials.json. A
`directory` pool here; on a Ceph pool with the RADOS store: tests/test_ceph_up_s3_rados.py."""
import json

import pytest

from services.object import bootstrap, gatewayconf
from services.object.tests.planefixture import s3_client, start_launcher, stop_procs
from tests.kit import free_port

pytestmark = pytest.mark.django_db


def test_s3_starts_once_its_pool_is_created_under_a_running_start(api, data_dir, settings):
    settings.SERVICE_OPTIONS = {"s3_pool": "later", "supervised": True, "s3_port": free_port(),
                                "host": "127.0.0.1"}
    procs = start_launcher(data_dir, settings.SERVICE_OPTIONS)
    try:
        assert bootstrap.bootstrap({"username": "admin"}) == {}     # the start: no pool yet
        assert bootstrap.open_gate_when_attached() == "waiting for pool later"
        assert not gatewayconf.gate_path(data_dir).exists()
        made = api.post("/api/v1/pools/", {"name": "later", "driver": "directory"}, format="json")
        assert made.status_code == 201, made.content
        assert bootstrap.open_gate_when_attached() == "bootstrapped"
        creds = json.loads((data_dir / "credentials.json").read_text())
        s3 = s3_client(creds["s3_endpoint"], creds["s3_access_key"], creds["s3_secret_key"])
        s3.create_bucket(Bucket="after")
        s3.put_object(Bucket="after", Key="k", Body=b"kept on the pool made later")
        assert s3.get_object(Bucket="after", Key="k")["Body"].read() == \
            b"kept on the pool made later"
        assert bootstrap.open_gate_when_attached() == "open"
    finally:
        stop_procs(procs)
