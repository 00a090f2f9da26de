"""Tier-down: move superseded checkpoint versions to their job's capacity pool.

Which versions (`due`): those of jobs with both `tier_after` and `capacity_pool`, that are
`superseded` (a newer step was committed), still `hot`, in a directory (S3 versions are not
tiered), superseded at least `tier_after` ago, with no active lease and no tier-down job
already pending or running. Pinned versions move too: a pin keeps a version from
retention, not on the hot pool. The periodic task `checkpoints.tier_all` starts one Job
(`checkpoint-tier-down`) per due version; retention leaves a version alone while its Job
is pending or running. An operator can start one now (`request_tier_down`, `POST
.../versions/{id}/tier-down/`), before `tier_after`, for any superseded, hot, unleased
version in a directory.

How one version moves (`move_version`):

1. Every file of the hot directory (not only the manifest's: DCP `.metadata` and anything
   else the training script wrote there) is copied to
   `<capacity file system>/<job>/step-N`, the read side drawn from the shared I/O budget
   under the class `migration`, hashing the hot bytes as they are read. A cold directory
   left by an earlier run that was cut off is removed first.
2. Each cold file is fsynced, read back and its sha256 compared with the hot bytes' and,
   where the manifest has one, with the manifest's (a hot copy that rotted is not moved).
3. Under the version's row lock (which `take_lease` also takes), the version becomes `cold`
   with its `cold_path`, the manifest gains the sha256 of shards that had none (so a later
   pre-warm verifies bytes, not only sizes), and only then is the hot directory removed.
   If, by then, the version is leased, no longer restorable or no longer hot, the cold copy
   is removed instead and the hot copy stays: a restore that started during the move keeps
   reading its hot copy; the next periodic run tries again once the lease is gone.

A version pre-warmed back to hot still has the cold copy pre-warm kept (`cold_path`). When it
is due again and that copy is still whole (`reusable_problems`: every manifest shard present
with the manifest's size and sha256, every other hot file there with the same bytes; checked
by reading only), tier-down skips steps 1-2: it switches to that copy (step 3) and releases
the hot copy, writing nothing to the capacity pool (`copied_bytes` 0, `reused_cold_copy`).
A copy that is not whole is removed and made again as above.

A worker killed during the move leaves the version hot and whole (at worst a partial cold
directory, which the next run removes); the reaper marks the Job failed when a worker starts.

Cold copies of every job tiered to a pool live in one file system of that pool,
`ckpt-cold-<pool>`, made on first use; deleting it while a cold version lives there is
refused (see `signals.py`). Pre-warm (`prewarm.py`) brings a cold version back.
"""
import hashlib
import logging
import os

from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Exists, F, OuterRef
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.utils import timezone

from plane import iobudget
from plane.jobs import job_task, start_job
from plane.models import Job
from plumbing.errors import Conflict
from services.checkpoints import prewarm, service, sources, verify
from services.checkpoints.models import (
    ACTIVE_JOB,
    CheckpointLease,
    CheckpointVersion,
    active_job,
)
from services.storage import service as storage
from services.storage.models import FileSystem, Pool

log = logging.getLogger(__name__)
V, T = CheckpointVersion.State, CheckpointVersion.Tier
JOB_KIND = "checkpoint-tier-down"
COPY_CHUNK = 4 << 20


class TierDownFailed(RuntimeError):
    """The cold copy could not be made whole; the version stays hot (its copy untouched)."""


def cold_filesystem_name(pool: Pool) -> str:
    return f"ckpt-cold-{pool.name}"[:63]


def cold_filesystem(pool: Pool) -> FileSystem:
    """The file system of `pool` that holds cold checkpoint copies, made on first use."""
    name = cold_filesystem_name(pool)
    fs = FileSystem.objects.select_related("pool").filter(name=name).first()
    if fs is None:
        try:
            fs = storage.create_filesystem(name=name, pool=pool, kept_by="checkpoints")
        except IntegrityError:  # another worker made it first
            fs = FileSystem.objects.select_related("pool").get(name=name)
    if fs.pool_id != pool.pk:
        raise Conflict(f"File system {name} exists in pool {fs.pool.name}, not in capacity "
                       f"pool {pool.name}; rename or delete it so cold checkpoints can go "
                       "there.")
    if not fs.path:
        raise Conflict(f"File system {name} has no directory (state {fs.state}).")
    return fs


def due(now=None):
    """The versions a tier-down should start for now (see the module doc)."""
    now = now or timezone.now()
    leased = CheckpointLease.objects.filter(version=OuterRef("pk"), expires_at__gt=now)
    moving = Job.objects.filter(kind=JOB_KIND, state__in=ACTIVE_JOB).annotate(
        version_id=Cast(KT("params__version"), BigIntegerField())).filter(
        version_id=OuterRef("pk"))
    return (CheckpointVersion.objects
            .filter(state=V.SUPERSEDED, tier=T.HOT, location="path",
                    job__tier_after__isnull=False, job__capacity_pool__isnull=False,
                    superseded_at__lte=now - F("job__tier_after"))
            .exclude(path="")
            .exclude(Exists(leased)).exclude(Exists(moving))
            .select_related("job__capacity_pool", "job__filesystem")
            .order_by("superseded_at"))


def _hashing_reader(path: str, sha):
    """The file's bytes in chunks, each added to `sha` as it is read."""
    with open(path, "rb") as f:
        while True:
            block = f.read(COPY_CHUNK)
            if not block:
                return
            sha.update(block)
            yield block


def _sha256_of(path: str) -> str:
    sha = hashlib.sha256()
    for _ in _hashing_reader(path, sha):
        pass
    return sha.hexdigest()


def _copy_file(src: str, dst: str, on_bytes) -> str:
    """Copy through the budget (class `migration`); fsync; the sha256 of the bytes read."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    sha = hashlib.sha256()
    with open(dst, "wb") as out:
        for block in iobudget.throttle(_hashing_reader(src, sha), "migration"):
            out.write(block)
            on_bytes(len(block))
        out.flush()
        os.fsync(out.fileno())
    return sha.hexdigest()


def _fsync_dirs(root: str) -> None:
    for dirpath, _, _ in os.walk(root):
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: str) -> None:
    if path and os.path.isdir(path):
        sources.remove_tree(path)


def move_version(version: CheckpointVersion,
                 progress=lambda pct, msg="", **counts: None) -> dict:
    """Copy, verify, switch, release (see the module doc); the outcome as a dict."""
    version = CheckpointVersion.objects.select_related(
        "job__capacity_pool", "job__filesystem").get(pk=version.pk)
    job = version.job
    if version.tier != T.HOT or version.state not in CheckpointVersion.RESTORABLE:
        return {"skipped": f"version is {version.state} and {version.tier}"}
    if job.capacity_pool is None:
        raise TierDownFailed(f"Checkpoint job {job.name} has no capacity pool.")
    if not version.path or not os.path.isdir(version.path):
        raise TierDownFailed(f"Version {version} has no hot directory at {version.path!r}.")
    fs = cold_filesystem(job.capacity_pool)
    cold = os.path.join(fs.path, job.name, service.step_dirname(version.step))
    files = verify.manifest_of_directory(version.path)
    if version.cold_path == cold:
        progress(0.0, "verifying the cold copy pre-warm kept")
        if not reusable_problems(version, cold, files):
            return _switch_to_kept_copy(version, cold, files)
    _remove(cold)  # a partial copy left by a run that was cut off, or one no longer whole

    names = {e["name"] for e in files}
    absent = [e["name"] for e in version.manifest if e["name"] not in names]
    if absent:
        raise TierDownFailed(f"the hot copy of {version} lacks {', '.join(absent[:10])}; "
                             "not moving it")
    expected = {e["name"]: e.get("sha256") for e in version.manifest}
    total, done = sum(e["size"] for e in files), 0

    def on_bytes(n):
        nonlocal done
        done += n
        progress(90.0 * done / max(1, total), f"copied {done} of {total} bytes to "
                                               f"{job.capacity_pool.name}",
                 done=done, total=total)
    try:
        hot_sha = {}
        for entry in files:
            name = entry["name"]
            hot_sha[name] = _copy_file(os.path.join(version.path, name),
                                       os.path.join(cold, name), on_bytes)
            if expected.get(name) and expected[name] != hot_sha[name]:
                raise TierDownFailed(f"the hot copy of {name} has sha256 {hot_sha[name]}, "
                                     f"the manifest says {expected[name]}; not moving it")
        _fsync_dirs(cold)
        progress(92.0, "verifying the cold copy")
        for entry in files:
            name = entry["name"]
            got = _sha256_of(os.path.join(cold, name))
            if got != hot_sha[name]:
                raise TierDownFailed(f"the cold copy of {name} reads back as sha256 {got}, "
                                     f"not {hot_sha[name]}")
        manifest = [dict(e, sha256=e.get("sha256") or hot_sha[e["name"]])
                    for e in version.manifest]
        progress(97.0, "switching to the cold copy")
        switched = prewarm.mark_cold(version, cold, manifest=manifest, verified=True)
    except BaseException:
        _remove(cold)  # the hot copy is untouched and still the version's
        raise
    if not switched:
        _remove(cold)
        return {"skipped": "the version was leased, deleted or changed during the move; "
                           "the hot copy stays", "copied_bytes": done}
    return {"copied_bytes": done, "files": len(files), "cold_path": cold,
            "pool": job.capacity_pool.name}


def reusable_problems(version: CheckpointVersion, cold: str, files: list) -> list:
    """Why the cold copy at `cold` cannot stand for the hot files `files` (empty: it can).

    It can when every manifest shard has a sha256 (tier-down records one) and the cold
    file matches its size and sha256, and every other hot file (DCP `.metadata` and the
    like) is in the cold copy with the same bytes. Only reads."""
    if not os.path.isdir(cold):
        return [f"{cold} is missing"]
    unsummed = [e["name"] for e in version.manifest if not e.get("sha256")]
    if unsummed:
        return [f"the manifest has no sha256 for {', '.join(unsummed[:10])}"]
    problems = [p.detail for p in verify.check_manifest(sources.DirectorySource(cold),
                                                        version.manifest)]
    listed = {e["name"] for e in version.manifest}
    for entry in files:
        name = entry["name"]
        if name in listed:
            continue
        path = os.path.join(cold, name)
        if not os.path.isfile(path) or os.path.getsize(path) != entry["size"] \
                or _sha256_of(path) != _sha256_of(os.path.join(version.path, name)):
            problems.append(f"{name} differs from the hot copy")
    return problems


def _switch_to_kept_copy(version: CheckpointVersion, cold: str, files: list) -> dict:
    """Switch to a whole cold copy (kept by pre-warm) without writing it again."""
    job = version.job
    if not prewarm.mark_cold(version, cold, verified=True):
        # leased, deleted or changed meanwhile: the kept copy stays, as pre-warm left it
        return {"skipped": "the version was leased, deleted or changed; the hot copy stays",
                "copied_bytes": 0}
    return {"copied_bytes": 0, "reused_cold_copy": True, "files": len(files),
            "cold_path": cold, "pool": job.capacity_pool.name}


def start_tier_down(version: CheckpointVersion, user=None) -> Job:
    """Queue a tier-down Job for one version."""
    return start_job(JOB_KIND, tier_down_version, user=user,
                     target=("checkpoint-version", str(version)),
                     params={"version": version.pk})


def request_tier_down(version: CheckpointVersion, user=None) -> Job:
    """Start the tier-down of one version now, whatever its job's `tier_after` (the manual
    trigger, `POST .../versions/{id}/tier-down/`); the Job already pending or running for
    it, if any. Invalid (400, naming the field `capacity_pool`) when the job has no capacity
    pool; Conflict (409) with the reason for the latest, a leased, a writing, aborted or
    deleted, an S3 or an already cold (or warming) version."""
    with transaction.atomic():
        version = CheckpointVersion.objects.select_for_update().get(pk=version.pk)
        job = version.job
        if job.capacity_pool is None:
            raise service.FieldInvalid(
                "capacity_pool", f"Checkpoint job {job.name} has no capacity pool; set one "
                "to move its versions there.")
        if version.state not in CheckpointVersion.RESTORABLE:
            raise Conflict(f"Version {version} is {version.state}; only a committed version "
                           "that a newer one superseded moves to the capacity pool.")
        if version.tier != T.HOT:
            raise Conflict(f"Version {version} is already {version.tier}; nothing to move.")
        latest = service.latest_version(job)
        if version.pk in (job.latest_id, latest.pk if latest else None):
            raise Conflict(f"Version {version} is the job's latest, which stays on the hot "
                           "pool; it can move once a newer step is committed.")
        if version.location != "path" or not version.path:
            raise Conflict(f"Version {version} is stored in S3; only versions in a "
                           "directory move to the capacity pool.")
        lease = version.active_leases().order_by("-expires_at").first()
        if lease is not None:
            raise Conflict(f"Version {version} is leased by a restore ({lease}); it can "
                           "move once the lease is released or expires.")
        running = active_job(JOB_KIND, version.pk)
        if running is not None:
            return running
        return start_tier_down(version, user=user)


def start_due(now=None) -> list:
    """Start a tier-down Job for every due version; their ids."""
    started = []
    for version in due(now):
        with transaction.atomic():
            started.append(start_tier_down(version).pk)
    return started


@job_task("checkpoints.tier_down_version")
def tier_down_version(ctx, version: int):
    """Copy a superseded version to the capacity pool, verify it, switch, release the hot
    copy (with progress)."""
    return move_version(CheckpointVersion.objects.get(pk=version), progress=ctx.progress)
