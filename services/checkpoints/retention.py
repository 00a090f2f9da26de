"""Retention: which versions of a job go, and why every other one stays.

A version is deleted only if it is superseded (or aborted: never committed, never offered)
and nothing keeps it: not the last N committed, not an every-K-th step, not newer than the
job's duration, not pinned, not leased, not being pre-warmed for a restore, not being
moved to the capacity pool (tierdown.py). Snapshots of the file system are not consulted:
a btrfs snapshot holds its own reference to the extents, so removing the live directory
does not take data from a snapshot (or a clone made from one).
"""
import logging
import os

from django.db import transaction
from django.utils import timezone

from services.checkpoints import service, sources
from services.checkpoints.models import CheckpointJob, CheckpointVersion, active_job
from services.checkpoints.tierdown import JOB_KIND

log = logging.getLogger(__name__)
V = CheckpointVersion.State


def _keep_reasons(job, version, rank_of: dict, now) -> list:
    """Why `version` stays; an empty list means it may go."""
    reasons = []
    if version.state == V.WRITING:
        return ["being written"]
    if job.latest_id == version.pk:
        reasons.append("latest")
    if version.pk in rank_of and rank_of[version.pk] < job.keep_last:
        reasons.append(f"among the last {job.keep_last} committed")
    if version.state != V.ABORTED:
        if job.keep_every and version.step % job.keep_every == 0:
            reasons.append(f"every {job.keep_every}th step")
        if (job.keep_newer_than and version.committed_at
                and version.committed_at > now - job.keep_newer_than):
            reasons.append(f"committed less than {job.keep_newer_than} ago")
        if version.state == V.COMMITTED:
            reasons.append("committed and not superseded")
    if version.pinned:
        reasons.append("pinned" + (f": {version.pin_reason}" if version.pin_reason else ""))
    for lease in version.active_leases():
        reasons.append(f"leased by {lease.holder or 'lease ' + str(lease.pk)} until "
                       f"{lease.expires_at.isoformat()}")
    if version.tier == CheckpointVersion.Tier.WARMING:
        reasons.append("pre-warm in progress for a restore")
    elif version.tier == CheckpointVersion.Tier.HOT and active_job(JOB_KIND, version.pk):
        reasons.append("moving to the capacity pool")  # the next run deletes it
    return reasons


def plan(job: CheckpointJob, now=None) -> dict:
    """{"delete": [...], "keep": [...]}: every live version with its reasons."""
    now = now or timezone.now()
    live = list(job.versions.exclude(state__in=[V.DELETING, V.DELETED]).order_by("-step"))
    restorable = [v for v in live if v.state in CheckpointVersion.RESTORABLE]
    rank_of = {v.pk: i for i, v in enumerate(restorable)}
    out = {"job": job.name, "delete": [], "keep": []}
    for v in live:
        reasons = _keep_reasons(job, v, rank_of, now)
        entry = {"id": v.pk, "step": v.step, "state": v.state, "tier": v.tier,
                 "size_bytes": v.size_bytes}
        if reasons:
            out["keep"].append({**entry, "reasons": reasons})
        else:
            why = ("aborted: never committed" if v.state == V.ABORTED
                   else "superseded and unreferenced")
            out["delete"].append({**entry, "reasons": [why]})
    return out


def _claim(job: CheckpointJob, version_id: int, now) -> CheckpointVersion | None:
    """Mark one version `deleting` if, under its row lock, nothing keeps it any more."""
    with transaction.atomic():
        CheckpointJob.objects.select_for_update().get(pk=job.pk)
        version = CheckpointVersion.objects.select_for_update().filter(pk=version_id).first()
        if version is None:
            return None
        if version.state == V.DELETING:
            return version  # a run that stopped half-way: finish it
        if version.state not in (V.SUPERSEDED, V.ABORTED):
            return None
        job.refresh_from_db()
        live = job.versions.filter(state__in=CheckpointVersion.RESTORABLE).order_by("-step")
        rank_of = {pk: i for i, pk in enumerate(live.values_list("pk", flat=True))}
        if _keep_reasons(job, version, rank_of, now):
            return None
        version.state = V.DELETING
        version.save(update_fields=["state"])
    return version


class UnsafeDelete(RuntimeError):
    """A version's recorded path is not inside its job's directory: refuse to delete it."""


def _remove(path: str, job: CheckpointJob) -> None:
    if not path or not os.path.isdir(path):
        return
    real = os.path.realpath(path)
    if os.path.basename(os.path.dirname(real)) != job.name or real.count("/") < 3:
        raise UnsafeDelete(f"{path} is not a step directory of job {job.name}; "
                           "not deleting it (fix the version's path)")
    sources.remove_tree(real)


def apply(job: CheckpointJob, progress=lambda pct, msg="": None) -> dict:
    """Delete what `plan` says may go, re-checking each version under its lock first."""
    now = timezone.now()
    candidates = list(job.versions.filter(state=V.DELETING).values_list("pk", flat=True))
    candidates += [e["id"] for e in plan(job, now)["delete"]]
    deleted, skipped, freed = [], [], 0
    for i, vid in enumerate(candidates):
        progress(100.0 * i / max(1, len(candidates)), f"deleting version {vid}")
        version = _claim(job, vid, now)
        if version is None:
            skipped.append(vid)
            continue
        try:
            _remove(version.path, job)
            _remove(version.cold_path, job)
            # a version never committed may have shards (or unfinished uploads) in S3 too
            if version.s3_prefix and (version.location == "s3" or version.committed_at is None):
                service.shard_source(version, "s3").delete_all()
        except Exception as exc:  # recorded on the version, then the job fails with it
            CheckpointVersion.objects.filter(pk=vid).update(
                error=f"retention could not delete its files: {exc}")
            raise
        CheckpointVersion.objects.filter(pk=vid).update(
            state=V.DELETED, deleted_at=timezone.now(), tier=CheckpointVersion.Tier.HOT)
        deleted.append(version.step)
        freed += version.size_bytes
    progress(100.0, f"deleted {len(deleted)} version(s)")
    return {"deleted_steps": deleted, "skipped": skipped, "freed_bytes": freed}
