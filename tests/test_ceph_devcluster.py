"""The development Ceph cluster: healthy, three OSDs under their own CRUSH hosts, two MDS,
every daemon recorded by PID."""


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
