"""An erasure-coded ceph pool (``ec:2+1``, failure domain ``osd``: the development cluster's
3 OSDs hold 2 data chunks and 1 coding chunk of every object), made through the driver: the
cluster has the EC profile the pool asked for, an RBD volume's bytes and a CephFS file
system's bytes land in erasure-coded RADOS pools, and both read back by hash."""
import os
from pathlib import Path

import pytest

from tests.ceph import driver_pool
from tests.dataplane_support import read_at, sha, write_at
from tests.kit import wait_for

pytestmark = pytest.mark.root
MiB = 1 << 20


def rados_pools(cluster) -> dict:
    return {p["pool_name"]: p for p in cluster.command("osd pool ls", detail="detail")}


def stored(cluster, pool: str) -> int:
    return next(p["stats"]["stored"] for p in cluster.command("df")["pools"]
                if p["name"] == pool)


def test_an_ec_pool_stores_rbd_and_cephfs_bytes_erasure_coded(ceph_cluster):
    with driver_pool(ceph_cluster, "ec", "ec", redundancy="ec:2+1",
                     failure_domain="osd") as (drv, pool):
        info = drv.pool_info(pool)
        assert (info.redundancy, info.health) == ("ec:2+1", "online")
        pools = rados_pools(ceph_cluster)
        data_pool = next(n for n, p in pools.items()
                         if n.endswith(f".{pool}.data") and p["erasure_code_profile"])
        profile = ceph_cluster.command("osd erasure-code-profile get",
                                       name=pools[data_pool]["erasure_code_profile"])
        assert (profile["k"], profile["m"], profile["crush-failure-domain"]) == ("2", "1",
                                                                                 "osd")
        assert pools[data_pool]["size"] == 3

        # an RBD volume: its data objects go to the EC pool
        vol = drv.create_volume(pool, "v", 64 * MiB)
        block = os.urandom(8 * MiB)
        write_at(vol.path, 4 * MiB + 512, block)
        assert sha(read_at(vol.path, 4 * MiB + 512, len(block))) == sha(block)
        assert read_at(vol.path, 0, 4096) == bytes(4096)     # thin: never written
        wait_for(lambda: stored(ceph_cluster, data_pool) >= len(block), 60,
                 f"{len(block)} bytes stored in {data_pool}", interval=1)

        # a CephFS file system: its files' layout names the pool's EC file data pool
        fs = drv.create_filesystem(pool, "f")
        shard = os.urandom(16 * MiB + 7)
        path = Path(fs.path, "step-1", "shard-0")
        path.parent.mkdir()
        with open(path, "wb") as f:
            f.write(shard)
            f.flush()
            os.fsync(f.fileno())
        fs_pool = os.getxattr(path, "ceph.file.layout.pool").decode()
        assert rados_pools(ceph_cluster)[fs_pool]["erasure_code_profile"] == \
            pools[data_pool]["erasure_code_profile"]
        wait_for(lambda: stored(ceph_cluster, fs_pool) >= len(shard), 60,
                 f"{len(shard)} bytes stored in {fs_pool}", interval=1)
        assert sha(path.read_bytes()) == sha(shard)
        drv.delete_filesystem(pool, "f")
        drv.delete_volume(pool, "v")
