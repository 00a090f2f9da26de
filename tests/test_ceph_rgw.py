"""radosgw on the development Ceph cluster (the S3 peer of bench/s3.py): it serves S3 to a
user made with radosgw-admin, and stops by its recorded PID."""
import os
import shutil

import boto3
import pytest

from tests.kit import free_port


@pytest.mark.skipif(not shutil.which("radosgw"), reason="radosgw is not installed (scripts/setup.sh)")
def test_radosgw_serves_s3_to_its_user_and_stops_by_pid(ceph_cluster):
    port = free_port()
    pid = ceph_cluster.start_rgw(port, name="t")
    try:
        assert ceph_cluster.pids()["rgw.t"] == pid
        ceph_cluster.rgw_user("tester", "RGWTESTKEY", "rgw-test-secret")
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="RGWTESTKEY", aws_secret_access_key="rgw-test-secret")
        s3.create_bucket(Bucket="rgw-test")
        data = os.urandom(3 << 20)
        s3.put_object(Bucket="rgw-test", Key="a/b", Body=data)
        assert s3.get_object(Bucket="rgw-test", Key="a/b")["Body"].read() == data
    finally:
        ceph_cluster.stop_rgw("t")
    assert "rgw.t" not in ceph_cluster.pids()
    assert not os.path.exists(f"/proc/{pid}")   # stopped and reaped
