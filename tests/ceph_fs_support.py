"""A CephFS-backed pool for tests that need file systems on the session's Ceph cluster
without the whole ceph driver: :func:`cephfs_pool` gives a mounted
:class:`dataplane.ceph.cephfs.CephFileSystems` and removes everything after."""
import contextlib
import secrets

from dataplane.ceph.cephfs import CephFileSystems


@contextlib.contextmanager
def cephfs_pool(cluster, workdir, pool: str = "p"):
    """Pool ``pool`` (its own RADOS data pool) mounted under ``workdir``; torn down after."""
    data_pool = f"strata-test-fs-{secrets.token_hex(3)}"
    cluster.command("osd pool create", pool=data_pool, pg_num=8)
    files = CephFileSystems(cluster.conf, cluster.client, str(cluster.keyring),
                            mount_dir=lambda name: workdir / "pools" / name,
                            capacity=lambda name: 8 << 30, run_dir=workdir / "run")
    try:
        files.attach_pool(pool, data_pool)
        files.mount(pool)
        yield files
    finally:
        try:
            files.evict_dead_local_clients()   # daemons the test stopped (Ganesha)
            for name in files.list_filesystems(pool):
                files.delete_filesystem(pool, name)
            files.detach_pool(pool, data_pool)
        finally:
            files.unmount(pool)
            files.close()
            cluster.command("osd pool rm", pool=data_pool, pool2=data_pool,
                            yes_i_really_really_mean_it=True)
