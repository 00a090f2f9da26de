"""The development Ceph cluster: healthy, three OSDs under their own CRUSH hosts, two MDS,
every daemon recorded by PID; a radosgw on it serves S3."""
import os


def test_dev_cluster_is_healthy_with_a_host_per_osd(ceph_cluster):
    assert ceph_cluster.health()["status"] == "HEALTH_OK"
    tree = ceph_cluster.command("osd tree")
    hosts = {n["name"]: n["children"] for n in tree["nodes"] if n["type"] == "host"}
    assert sorted(hosts) == ["host0", "host1", "host2"]
    assert sorted(len(children) for children in hosts.values()) == [1, 1, 1]
    assert all(n["status"] == "up" for n in tree["nodes"] if n["type"] == "osd")
    pids = ceph_cluster.pids()
    assert sorted(pids) == ["mds.a", "mds.b", "mgr.x", "mon.a", "osd.0", "osd.1", "osd.2"]
    assert ceph_cluster.conf.is_file() and ceph_cluster.keyring.is_file()
    mds = ceph_cluster.command("mds stat")
    assert len(mds["fsmap"]["standbys"]) + sum(
        len(fs["mdsmap"]["info"]) for fs in mds["fsmap"]["filesystems"]) == 2


def test_radosgw_serves_s3_to_its_user_and_stops_by_pid(ceph_cluster):
    import boto3

    from tests.kit import free_port

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
