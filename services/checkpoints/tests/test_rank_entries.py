"""`GET /api/v1/checkpoint-jobs/<job>/entries/?ranks=N&group_size=G`: the NFS entry each rank
writes through, spread over the nodes serving the job's file system. The rows are made
directly (a Ceph pool row, its file system, an export, two nodes heartbeating and one down):
this checks the rule and the API's answers; the entries themselves are served and used by
real nodes in tests/test_ceph_cluster_nfs.py."""
from datetime import timedelta

import pytest
from django.utils import timezone

from services.checkpoints.models import CheckpointJob
from services.file.models import NfsExport
from services.nodes.models import Node
from services.storage.models import FileSystem, Pool

pytestmark = pytest.mark.django_db


def test_ranks_spread_over_the_up_entries_in_groups(api):
    pool = Pool.objects.create(name="shared", driver="ceph", redundancy="replicated:3")
    fs = FileSystem.objects.create(name="train", pool=pool)
    export = NfsExport.objects.create(filesystem=fs, pseudo="/train", path="",
                                      clients=[{"address": "10.0.0.0/8", "access": "rw"}])
    now = timezone.now()
    for name, address, beat in (("n1", "10.0.1.1", now), ("n2", "10.0.1.2", now),
                                ("n3", "10.0.1.3", now - timedelta(minutes=5))):
        Node.objects.create(name=name, management_address=address, data_address=address,
                            services=["file"], state=Node.State.UP, last_heartbeat=beat,
                            options={"nfs_port": 2049})
    job = CheckpointJob.objects.create(name="llm", filesystem=fs)

    r = api.get(f"/api/v1/checkpoint-jobs/{job.name}/entries/?ranks=8&group_size=2")
    assert r.status_code == 200, r.content
    answer = r.json()
    assert answer["export"] == "/train" and answer["group_size"] == 2
    # n3 is down: not offered
    assert [(e["node"], e["address"], e["port"]) for e in answer["entries"]] == [
        ("n1", "10.0.1.1", 2049), ("n2", "10.0.1.2", 2049)]
    assert answer["entries"][0]["mount"] == \
        "mount -t nfs -o vers=4.1,nconnect=4,port=2049 10.0.1.1:/train /mnt/train"
    assert answer["rank_entry"] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert api.get(f"/api/v1/checkpoint-jobs/{job.name}/entries/?ranks=3").json()[
        "rank_entry"] == [0, 1, 0]

    for query, field in (("", "ranks"), ("ranks=0", "ranks"), ("ranks=x", "ranks"),
                         ("ranks=4&group_size=0", "group_size")):
        r = api.get(f"/api/v1/checkpoint-jobs/{job.name}/entries/?{query}")
        assert r.status_code == 400 and r.json()["detail"].startswith(field), (query, r.content)

    export.delete()
    r = api.get(f"/api/v1/checkpoint-jobs/{job.name}/entries/?ranks=2")
    assert r.status_code == 409 and r.json()["error"] == "no_nfs_export", r.content
