"""keepalived's takeover command (services/file/takeover.py) on a node that serves no NFS
cluster: nothing to do, said in its log, exit 0; the record of a takeover and when it is due
(the start itself is checked end to end in tests/test_ceph_cluster_deploy.py, and the lift
of a takeover's grace in tests/test_ceph_cluster_nfs.py, with a real grace database)."""
import subprocess
import sys
import time

from services.file import takeover


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


def _took(data_dir, owner: str, ago: float) -> None:
    record = takeover.took_path(data_dir, owner)
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(f"{time.time() - ago:.3f}\n")


def test_giving_the_address_back_removes_the_takeover_record(tmp_path):
    """keepalived's notify_backup: the owner took its address back (its own restart put the
    cluster in grace for its clients), so this node must not end that grace later."""
    _took(tmp_path, "node1", 10)
    done = subprocess.run([sys.executable, "-m", "services.file.takeover", str(tmp_path),
                           "node1", "backup"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not takeover.took_path(tmp_path, "node1").exists()
    assert "gave node1's address back" in (tmp_path / "log" / "takeover.log").read_text()


def test_a_takeover_is_left_alone_until_the_mds_closed_the_dead_servers_sessions(tmp_path):
    _took(tmp_path, "node1", takeover.LIFT_AFTER - 10)
    assert takeover.lift_due(tmp_path) == []              # not due: Ceph not even asked
    assert takeover.took_path(tmp_path, "node1").exists()
    # due, on a node that serves no NFS cluster (no grace database): nothing to give up
    assert takeover.lift_due(tmp_path, now=time.time() + 11) == []
    assert not takeover.took_path(tmp_path, "node1").exists()
