"""`--s3-store rados` on a pool that is not a Ceph pool: the plane says why (one line in its
log) and serves no S3 rather than putting the buckets in files behind the user's back; the
gateway's config is not rendered. (On a Ceph pool: tests/test_ceph_cluster_s3.py.)"""
import logging

import pytest

from services.object import bootstrap, gatewayconf, service

pytestmark = pytest.mark.django_db


def test_the_rados_store_on_a_directory_pool_is_refused_with_a_reason(api, data_dir, settings,
                                                                       caplog):
    settings.SERVICE_OPTIONS = {"s3_store": "rados", "s3_port": 1, "host": "127.0.0.1"}
    made = api.post("/api/v1/pools/", {"name": "default", "driver": "directory"}, format="json")
    assert made.status_code == 201, made.content
    with caplog.at_level(logging.ERROR, logger="services.object"):
        assert bootstrap.bootstrap({"username": "admin"}) == {}
    assert "The RADOS S3 store needs the S3 pool to be a Ceph pool; pool default is " \
           "directory" in caplog.text
    assert service.render_gateway_config() is None
    assert gatewayconf.read_config(gatewayconf.config_path(data_dir)) is None
