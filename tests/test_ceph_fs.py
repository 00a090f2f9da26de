"""File systems on CephFS (dataplane.ceph.cephfs) against the session's development cluster:
a quota refuses writes at once, and checkpoint directories of different jobs are served by
different active MDS ranks once pinned round-robin.
"""
import errno
import os

import pytest

from dataplane.ceph.cephfs import mds_rank_for
from tests.ceph_fs_support import cephfs_pool
from tests.kit import wait_for

MiB = 1 << 20


@pytest.fixture
def cephfs(ceph_cluster, tmp_path):
    """A CephFS-backed Strata pool ``p``, mounted under tmp_path."""
    with cephfs_pool(ceph_cluster, tmp_path) as files:
        yield files


def test_quota_refuses_writes_past_it_with_edquot(cephfs):
    fs = cephfs.create_filesystem("p", "q", quota_bytes=8 * MiB)
    assert fs.quota_bytes == 8 * MiB
    written = 0
    with open(os.path.join(fs.path, "big"), "wb", buffering=0) as f:
        with pytest.raises(OSError) as exc:
            for _ in range(64):
                written += f.write(os.urandom(MiB))
    assert exc.value.errno == errno.EDQUOT
    # CephFS checks quotas in its clients against sizes the MDS reports about once a
    # second: a busy machine overshoots by a few MiB (12 MiB seen at load 12), never
    # by the 56 MiB more this loop tries
    assert written < 24 * MiB
    # raising the quota lets writes go on
    cephfs.set_filesystem_quota("p", "q", 32 * MiB)
    with open(os.path.join(fs.path, "more"), "wb") as f:
        f.write(b"x" * MiB)
    assert cephfs.filesystem_info("p", "q").quota_bytes == 32 * MiB


def test_job_directories_pinned_round_robin_are_served_by_different_ranks(cephfs):
    """Checkpoint directories of two jobs, pinned to ranks round-robin, end up with two
    different MDS ranks authoritative for them; their shards read back."""
    ranks = wait_for(lambda: cephfs.active_ranks() if len(cephfs.active_ranks()) >= 2 else None,
                     60, "two active MDS ranks", interval=0.5)
    fs = cephfs.create_filesystem("p", "ckpt")
    jobs = ["job-a", "job-b"]
    want = {}
    for i, job in enumerate(jobs):
        os.makedirs(os.path.join(fs.path, job))
        want[f"fs/ckpt/{job}"] = mds_rank_for(i, ranks)
        cephfs.pin("p", f"fs/ckpt/{job}", want[f"fs/ckpt/{job}"])
    assert len(set(want.values())) == 2
    for job in jobs:
        for shard in range(4):
            with open(os.path.join(fs.path, job, f"shard-{shard}"), "wb") as f:
                f.write(job.encode() * 1000)

    def served():
        seen = cephfs.subtree_ranks("p")
        return seen if all(seen.get(d) == r for d, r in want.items()) else None

    seen = wait_for(served, 60, f"subtrees {want} on their ranks", interval=0.5)
    assert seen["fs/ckpt/job-a"] != seen["fs/ckpt/job-b"]
    for job in jobs:
        with open(os.path.join(fs.path, job, "shard-3"), "rb") as f:
            assert f.read() == job.encode() * 1000
