"""keepalived's takeover command (services/file/takeover.py) on a node that serves no NFS
cluster: nothing to do, said in its log, exit 0 (the start itself is checked end to end in
tests/test_ceph_cluster_deploy.py, with a real grace database)."""
import subprocess
import sys


def test_a_node_without_an_nfs_cluster_does_nothing_and_says_so(tmp_path):
    done = subprocess.run([sys.executable, "-m", "services.file.takeover", str(tmp_path),
                           "node1"], capture_output=True, text=True, env={}, timeout=60)
    assert done.returncode == 0, done.stderr
    log = (tmp_path / "log" / "takeover.log").read_text()
    assert "took node1's address over; this node serves no NFS cluster: nothing to do" in log


def test_wrong_usage_is_one_line_and_exit_2():
    done = subprocess.run([sys.executable, "-m", "services.file.takeover"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
