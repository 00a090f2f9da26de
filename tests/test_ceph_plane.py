"""A file system on a ceph pool, through the plane (REST API) on the session's development
Ceph cluster: each checkpoint job's directory is pinned to its own MDS rank when the job is
created; a version is committed through the catalog only once every shard is whole, and a
restore reads every byte back by hash (also through a libcephfs client of its own, so the
bytes are in the cluster, not in a cache); retention frees the space of versions written
through NFS while Ganesha still serves them; an NFS export of the file system is served by
Ganesha through FSAL_CEPH to nfs-rs, which writes, reads and lists directories; and
`strata up --s3-pool` on a ceph pool keeps the S3 gateway's data in the CephFS."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from pathlib import Path

import boto3
import pytest

from services.file.tests.nfs_client import connect, listdir, read_hash, sha, write_file
from services.file.tests.plane_support import plane_daemons
from services.object import bootstrap
from services.object import service as object_service
from services.storage.drivers import driver_for
from tests.ceph import plane_ceph_pool
from tests.kit import Gateway, wait_for

pytestmark = [pytest.mark.root, pytest.mark.django_db]
MiB = 1 << 20


@pytest.fixture
def ceph_pool(api, ceph_cluster, data_dir):
    """A ceph pool made through the API, with file system ``train``."""
    name = f"cp-{uuid.uuid4().hex[:6]}"
    with plane_ceph_pool(api, ceph_cluster, name):
        fs = api.post("/api/v1/filesystems/", {"name": "train", "pool": name}, format="json")
        assert fs.status_code == 201, fs.json()
        yield name


@pytest.fixture
def cephfs(ceph_cluster):
    """A libcephfs client of the cluster's CephFS of its own (not the plane's mount)."""
    from dataplane.ceph.cephfs import CephFileSystems   # loads libcephfs: only with a cluster

    files = CephFileSystems(ceph_cluster.conf, ceph_cluster.client, str(ceph_cluster.keyring))
    yield files
    files.close()


def cephfs_sha(cephfs, path: str) -> str:
    """sha256 of a CephFS file read through libcephfs."""
    fd = cephfs.fs.open(path.encode(), "r", 0)
    digest, offset = hashlib.sha256(), 0
    try:
        while block := cephfs.fs.read(fd, offset, 4 * MiB):
            digest.update(block)
            offset += len(block)
    finally:
        cephfs.fs.close(fd)
    return digest.hexdigest()


def test_checkpoint_jobs_on_cephfs_pinned_apart_commit_whole_versions_and_restore(
        api, ceph_pool, cephfs):
    ranks = wait_for(lambda: cephfs.active_ranks() if len(cephfs.active_ranks()) > 1 else None,
                     90, "two active MDS ranks", interval=0.5)
    for job in ("job-a", "job-b"):
        r = api.post("/api/v1/checkpoint-jobs/", {"name": job, "filesystem": "train"},
                     format="json")
        assert r.status_code == 201, r.json()
    # each job's directory was pinned to an MDS rank of its own when the job was made
    jobs_dir = f"/strata/{ceph_pool}/fs/train"
    pins = {job: int(cephfs.fs.getxattr(f"{jobs_dir}/{job}".encode(), "ceph.dir.pin"))
            for job in ("job-a", "job-b")}
    assert sorted(pins.values()) == ranks[:2]

    versions, shards = {}, {}
    for job in ("job-a", "job-b"):
        v = api.post(f"/api/v1/checkpoint-jobs/{job}/versions/", {"step": 100}, format="json")
        assert v.status_code == 201, v.json()
        versions[job] = v.json()
        assert versions[job]["path"].startswith(str(Path(api.get(
            f"/api/v1/pools/{ceph_pool}/").json()["mountpoint"])))
        shards[job] = {f"rank{r}/shard.distcp": os.urandom(3 * MiB + r) for r in range(4)}
    manifests = {job: [{"name": n, "size": len(d), "sha256": sha(d)}
                       for n, d in shards[job].items()] for job in shards}

    def rank(job, name, data, upto):
        path = Path(versions[job]["path"], name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data[:upto])
            f.flush()
            os.fsync(f.fileno())

    # every rank of both jobs writes at once; rank 3 of job-a is cut short
    threads = [threading.Thread(target=rank, args=(job, n, d, len(d) // 2 if (
        job == "job-a" and n.startswith("rank3")) else len(d)))
        for job in shards for n, d in shards[job].items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def commit(job):
        return api.post(f"/api/v1/checkpoint-jobs/{job}/versions/{versions[job]['id']}/commit/",
                        {"manifest": manifests[job]}, format="json")

    refused = commit("job-a")
    assert refused.status_code == 409, refused.json()
    assert [(s["name"], s["problem"]) for s in refused.json()["shards"]] == [
        ("rank3/shard.distcp", "short")]
    assert api.get("/api/v1/checkpoint-jobs/job-a/latest/").status_code == 404
    rank("job-a", "rank3/shard.distcp", shards["job-a"]["rank3/shard.distcp"], None)
    for job in ("job-a", "job-b"):
        done = commit(job)
        assert done.status_code == 200, done.json()
        assert done.json()["state"] == "committed"
        assert done.json()["size_bytes"] == sum(len(d) for d in shards[job].values())

    # and the ranks they were pinned to are the ones serving them now
    wanted = {f"fs/train/{job}": rank for job, rank in pins.items()}
    wait_for(lambda: all(cephfs.subtree_ranks(ceph_pool).get(d) == r for d, r in wanted.items()),
             90, f"the job directories served by ranks {wanted}", interval=0.5)

    for job in ("job-a", "job-b"):
        latest = api.get(f"/api/v1/checkpoint-jobs/{job}/latest/").json()
        assert latest["id"] == versions[job]["id"]
        lease = api.post(f"/api/v1/checkpoint-jobs/{job}/versions/{latest['id']}/lease/",
                         {"ttl_seconds": 60, "holder": "restore-test"}, format="json")
        assert lease.status_code in (200, 201), lease.json()
        for name, data in shards[job].items():
            assert sha(Path(latest["path"], name).read_bytes()) == sha(data)
            where = f"/strata/{ceph_pool}/fs/train/{job}/step-100/{name}"
            assert cephfs_sha(cephfs, where) == sha(data)
        assert api.delete(f"/api/v1/checkpoint-leases/{lease.json()['id']}/").status_code == 204


def test_nfs_export_of_a_ceph_file_system_is_served_through_fsal_ceph(
        api, ceph_pool, cephfs, data_dir, settings):
    pytest.importorskip("nfs_rs")
    with plane_daemons(data_dir, settings) as daemons:
        made = api.post("/api/v1/nfs-exports/", {"filesystem": "train",
                                                 "clients": ["127.0.0.1 rw no_root_squash"]},
                        format="json")
        assert made.status_code == 201, made.json()
        assert made.json()["state"] == "online", (made.json(), daemons.log("ganesha"))
        conf = Path(data_dir, "run", "ganesha", "ganesha.conf")
        conf = conf if conf.exists() else next(Path(data_dir).rglob("ganesha*.conf"))
        text = conf.read_text()
        assert "Name = CEPH;" in text and f"/strata/{ceph_pool}/fs/train" in text

        port = settings.SERVICE_OPTIONS["nfs_port"]
        payload = os.urandom(8 * MiB + 3)
        with connect(port, "/train") as client:
            client.mkdir("ckpt")
            write_file(client, "ckpt/shard-0", payload)
            write_file(client, "ckpt/.metadata", b"index")
            assert read_hash(client, "ckpt/shard-0") == (len(payload), sha(payload))
            assert listdir(client, "ckpt") == [".metadata", "shard-0"]
            assert listdir(client, ".") == ["ckpt"]
        # the bytes are in the CephFS directory of the file system
        where = f"/strata/{ceph_pool}/fs/train/ckpt/shard-0"
        assert cephfs_sha(cephfs, where) == sha(payload)
        gone = api.delete(f"/api/v1/nfs-exports/{made.json()['id']}/")
        assert gone.status_code == 204


def test_s3_pool_option_puts_the_gateway_data_on_the_ceph_pool(api, ceph_cluster, cephfs,
                                                               settings, tmp_path):
    """`strata up --s3-pool POOL`: while POOL does not exist the gateway gets no data root
    (never the default pool behind the user's back); once it is a ceph pool, the gateway's
    file system is made on it and what boto3 PUTs is kept in the CephFS."""
    name = f"s3-{uuid.uuid4().hex[:6]}"
    settings.SERVICE_OPTIONS = {"s3_pool": name}
    assert api.post("/api/v1/pools/", {"name": "default", "driver": "directory"},
                    format="json").status_code == 201
    assert bootstrap.ensure_gateway() is None
    with plane_ceph_pool(api, ceph_cluster, name):
        gw_row = bootstrap.ensure_gateway()
        assert gw_row.filesystem.pool.name == name
        root = object_service.data_root(gw_row)
        assert root.startswith(driver_for("ceph").pool_info(name).mountpoint + "/")  # ceph-fuse
        os.makedirs(root, exist_ok=True)
        (tmp_path / "gw").mkdir()
        gw = Gateway(tmp_path / "gw", {"CEPHS3POOLKEY": {"secret_key": "ceph-s3-pool-secret",
                                                          "user": "u", "admin": True}},
                     data_root=root)
        try:
            gw.start(timeout=30)
            s3 = boto3.client("s3", endpoint_url=gw.endpoint, aws_access_key_id="CEPHS3POOLKEY",
                              aws_secret_access_key="ceph-s3-pool-secret",
                              region_name="us-east-1")
            s3.create_bucket(Bucket="ckpt")
            body = os.urandom(6 * MiB)
            s3.put_object(Bucket="ckpt", Key="step-1/shard-0", Body=body)
            got = s3.get_object(Bucket="ckpt", Key="step-1/shard-0")["Body"].read()
            assert sha(got) == sha(body)
        finally:
            gw.stop()
        # the object's bytes are in the CephFS directory of the gateway's file system
        where = f"/strata/{name}/fs/{gw_row.filesystem.name}".encode()
        wait_for(lambda: int(cephfs.fs.getxattr(where, "ceph.dir.rbytes")) >= len(body),
                 90, "the object's bytes counted in the CephFS directory", interval=0.5)


def _mds_strays(cephfs) -> int:
    """Unlinked inodes the active MDS ranks still keep (``perf dump`` mds_cache.num_strays)."""
    total = 0
    for rank in cephfs.active_ranks():
        rc, out, err = cephfs.fs.mds_command(str(rank), json.dumps({"prefix": "perf dump"}), b"")
        assert rc == 0, err
        total += json.loads(out)["mds_cache"]["num_strays"]
    return total


def _pool_stored(ceph_cluster, data_pool: str) -> int:
    """Bytes stored in RADOS pool ``data_pool`` (``ceph df``, before replication)."""
    pools = ceph_cluster.command("df")["pools"]
    return next(p["stats"]["stored"] for p in pools if p["name"] == data_pool)


def test_retention_frees_versions_written_through_nfs(api, ceph_pool, cephfs, ceph_cluster,
                                                      data_dir, settings):
    """Versions written through Ganesha (FSAL_CEPH) and deleted by retention through the
    plane's mount give their space back: Ganesha's CephFS client must not keep the unlinked
    files as strays the MDS cannot purge."""
    pytest.importorskip("nfs_rs")
    from services.checkpoints import retention
    from services.checkpoints.models import CheckpointJob

    root = f"/strata/{ceph_pool}"
    data_pool = cephfs.fs.getxattr(root.encode(), "ceph.dir.layout.pool").decode()
    with plane_daemons(data_dir, settings) as daemons:
        made = api.post("/api/v1/nfs-exports/", {"filesystem": "train",
                                                 "clients": ["127.0.0.1 rw no_root_squash"]},
                        format="json")
        assert made.status_code == 201 and made.json()["state"] == "online", (
            made.json(), daemons.log("ganesha"))
        job = api.post("/api/v1/checkpoint-jobs/", {"name": "llm", "filesystem": "train",
                                                    "keep_last": 1}, format="json")
        assert job.status_code == 201, job.json()
        fs_path = api.get("/api/v1/filesystems/train/").json()["path"]
        shard = os.urandom(8 * MiB)
        with connect(settings.SERVICE_OPTIONS["nfs_port"], "/train") as client:
            for step in (100, 200, 300):
                v = api.post("/api/v1/checkpoint-jobs/llm/versions/", {"step": step},
                             format="json").json()
                where = os.path.relpath(v["path"], fs_path)
                for r in range(4):
                    write_file(client, f"{where}/rank{r}.distcp", shard)
                done = api.post(f"/api/v1/checkpoint-jobs/llm/versions/{v['id']}/commit/",
                                {"manifest": [{"name": f"rank{r}.distcp", "size": len(shard),
                                               "sha256": sha(shard)} for r in range(4)]},
                                format="json")
                assert done.status_code == 200, done.json()
            wait_for(lambda: _pool_stored(ceph_cluster, data_pool) >= 12 * len(shard), 60,
                     "the pool's usage to show the versions", interval=1)
            before = _pool_stored(ceph_cluster, data_pool)

            result = retention.apply(CheckpointJob.objects.get(name="llm"))
            assert sorted(result["deleted_steps"]) == [100, 200]
            freed, start = 8 * len(shard), time.monotonic()
            # Ganesha still serves the export (the client stays connected, as on a training
            # host) and its CephFS client keeps the unlinked inodes (the MDS strays) cached
            try:
                wait_for(lambda: before - _pool_stored(ceph_cluster, data_pool) >= 0.9 * freed,
                         90, "the space of the deleted versions to be freed", interval=1)
            finally:
                print(f"strays {_mds_strays(cephfs)}, stored {before} -> "
                      f"{_pool_stored(ceph_cluster, data_pool)} "
                      f"after {time.monotonic() - start:.1f} s")
            kept = os.path.relpath(v["path"], fs_path)
            assert read_hash(client, f"{kept}/rank3.distcp") == (len(shard), sha(shard))
