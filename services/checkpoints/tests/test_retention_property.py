"""Property: over random sequences of save, abort, lease, release, pin, unpin and retention
runs, retention never deletes a pinned, leased, latest, last-N or every-K-th version, and
deletes nothing that is not superseded or aborted (directory driver: no root needed)."""
import itertools
import os

import pytest

from services.checkpoints import retention, service
from services.checkpoints.models import CheckpointLease, CheckpointVersion
from services.storage.models import FileSystem

hypothesis = pytest.importorskip("hypothesis", reason="property tests need hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytestmark = [pytest.mark.django_db]
V = CheckpointVersion.State
OPS = st.lists(st.tuples(st.sampled_from(
    ["save"] * 5 + ["abort", "lease", "release", "pin", "unpin", "retention"]),
    st.integers(0, 20)), min_size=1, max_size=25)
_names = itertools.count()


@pytest.fixture
def filesystem(api):
    r = api.post("/api/v1/pools/", {"name": "dp", "driver": "directory"}, format="json")
    assert r.status_code == 201, r.json()
    r = api.post("/api/v1/filesystems/", {"name": "train", "pool": "dp"}, format="json")
    assert r.status_code == 201, r.json()
    return FileSystem.objects.get(name="train")


def protected(job) -> dict:
    """{version id: why} for what retention must keep, computed independently of it."""
    job.refresh_from_db()
    keep = {}
    restorable = list(job.versions.filter(state__in=[V.COMMITTED, V.SUPERSEDED])
                      .order_by("-step"))
    for v in restorable[:job.keep_last]:
        keep[v.pk] = "last N"
    for v in job.versions.exclude(state__in=[V.DELETED, V.DELETING]):
        if v.pinned:
            keep[v.pk] = "pinned"
        if v.active_leases().exists():
            keep[v.pk] = "leased"
        if v.state == V.COMMITTED or v.state == V.WRITING:
            keep[v.pk] = v.state
        if job.keep_every and v.state == V.SUPERSEDED and v.step % job.keep_every == 0:
            keep[v.pk] = "every K"
    if job.latest_id:
        keep[job.latest_id] = "latest"
    return keep


@settings(max_examples=20, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=OPS, keep_last=st.integers(1, 2), keep_every=st.sampled_from([None, 2, 3]))
def test_retention_never_deletes_a_referenced_version(filesystem, ops, keep_last, keep_every):
    job = service.create_job(name=f"j{next(_names)}", filesystem=filesystem,
                             keep_last=keep_last, keep_every=keep_every)
    step, leases = 0, []
    for op, i in [*ops, ("retention", 0)]:
        live = list(job.versions.filter(state__in=[V.COMMITTED, V.SUPERSEDED]).order_by("step"))
        pick = live[i % len(live)] if live else None
        if op == "save":
            step += 1
            v, _ = service.begin_version(job, step)
            with open(os.path.join(v.path, "shard"), "wb") as f:
                f.write(b"x" * step)
            service.commit_version(v, [{"name": "shard", "size": step}])
        elif op == "abort":
            step += 1
            service.abort_version(service.begin_version(job, step)[0])
        elif op == "lease" and pick:
            leases.append(service.take_lease(pick, ttl_seconds=600)[0])
        elif op == "release" and leases:
            service.release_lease(leases.pop(i % len(leases)))
        elif op in ("pin", "unpin") and pick:
            service.set_pin(pick, op == "pin")
        elif op == "retention":
            before = {v.pk: v for v in job.versions.all()}
            keep = protected(job)
            preview = retention.plan(job)
            assert not {e["id"] for e in preview["delete"]} & set(keep)
            result = retention.apply(job)
            hypothesis.event("retention deleted" if result["deleted_steps"] else "kept all")
            for pk, old in before.items():
                now = CheckpointVersion.objects.get(pk=pk)
                if pk in keep:
                    assert now.state == old.state, (keep[pk], old.step)
                    assert os.path.isdir(now.path), (keep[pk], old.step)
                elif now.state == V.DELETED and old.state != V.DELETED:
                    assert old.state in (V.SUPERSEDED, V.ABORTED)
                    assert not os.path.exists(now.path)
    job.refresh_from_db()
    if job.latest_id:  # whatever happened, the latest committed version is whole
        assert os.path.isdir(job.latest.path)
    CheckpointLease.objects.filter(version__job=job).delete()
