"""The development Ceph cluster: healthy, three OSDs under their own CRUSH hosts, two MDS,
every daemon recorded by PID; `strata ceph dev-cluster` reports it."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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


def test_strata_ceph_dev_cluster_status_from_the_cli_needs_no_appliance(ceph_cluster, tmp_path):
    """`strata ceph dev-cluster status DIR` answers on the machine itself: no credentials,
    no running appliance; it names every daemon's PID and the cluster's health."""
    env = {k: v for k, v in os.environ.items() if k not in ("STRATA_URL", "STRATA_TOKEN")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "console.cli.main", "--data-dir",
                           str(tmp_path), "ceph", "dev-cluster", "status",
                           str(ceph_cluster.root)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["pids"] == ceph_cluster.pids()
    assert status["health"]["status"] == "HEALTH_OK"
    missing = subprocess.run([sys.executable, "-m", "console.cli.main", "ceph", "dev-cluster",
                              "status", str(tmp_path / "nothing-here")], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "error:" in missing.stderr
