"""The checkpoint path: begin a version, verify and commit it, abort the stale, lease and pin.

Checks that read shards run before the transaction; the state change (committed, latest
moved, older versions superseded) happens in one transaction holding the job's row lock,
so two commits of one job never interleave and a refused commit changes nothing.
"""
import contextlib
import logging
import os
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from plumbing.errors import Conflict, Invalid, Unavailable
from services.checkpoints import prewarm, sources, verify
from services.checkpoints.models import (
    CheckpointJob,
    CheckpointLease,
    CheckpointVersion,
)
from services.object.public import class_as_checkpoints, plane_s3_config
from services.storage import service as storage

log = logging.getLogger(__name__)
V = CheckpointVersion.State
# a file system with less free than this is full for writers: btrfs refuses data writes while
# still reporting a little room it keeps for metadata
FULL_BELOW_BYTES = 32 << 20


class IncompleteCheckpoint(Conflict):
    """A commit was refused because shards are missing, short, long or fail their checksum
    (409 `{"error": "incomplete", "detail", "shards": [...]}` naming every bad shard)."""

    code = "incomplete"

    def __init__(self, problems: list, why: str = ""):
        self.problems = problems
        super().__init__(verify.describe(problems) + (f" {why}" if why else ""))

    def to_dict(self) -> dict:
        return {**super().to_dict(), "shards": [p.as_dict() for p in self.problems]}


class FieldInvalid(Invalid):
    """One field of the request is wrong (400 with `fields`, as a serializer's error)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)

    def to_dict(self) -> dict:
        return {"error": self.code, "detail": f"{self.field}: {self.message}",
                "fields": {self.field: [self.message]}}


class BadManifest(FieldInvalid):
    """The manifest is malformed (400)."""

    def __init__(self, message: str):
        super().__init__("manifest", message)


def step_dirname(step: int) -> str:
    return f"step-{step}"


def job_directory(job: CheckpointJob) -> str | None:
    """Where a job's versions live on its file system (`<fs path>/<job>`), if it has one."""
    if job.filesystem_id is None or not job.filesystem.path:
        return None
    return os.path.join(job.filesystem.path, job.name)


def s3_prefix(job: CheckpointJob, dirname: str) -> str:
    """A version's S3 location: `s3://<bucket>/<job>/<dir>/` (empty without a bucket)."""
    return f"s3://{job.bucket}/{job.name}/{dirname}/" if job.bucket else ""


def _clear_directory(path: str) -> None:
    if path and os.path.isdir(path):
        sources.remove_tree(path)


# -- jobs and begin ------------------------------------------------------------------------

def create_job(**fields) -> CheckpointJob:
    """Record a training job and make its directory on its file system."""
    with transaction.atomic():
        job = CheckpointJob.objects.create(**fields)
        if job.bucket:
            class_as_checkpoints(job.bucket)     # its saves queue as checkpoints in the gateway
        base = job_directory(job)
        if base:
            os.makedirs(base, exist_ok=True)
            # on Ceph, each job's directory gets its own metadata server (round-robin), so
            # a burst of many jobs' shard creates is shared by the active MDS
            storage.spread_directory(job.filesystem, job.name, job.pk)
    return job


def begin_version(job: CheckpointJob, step: int) -> tuple:
    """(version, created) for `step`: every rank may ask; they all get the same version.

    A step whose earlier attempt was aborted or deleted starts over (its leftovers are
    removed); a step already committed is a conflict.
    """
    if job.filesystem_id is None and not job.bucket:
        raise Conflict(f"Checkpoint job {job.name} has neither a file system nor a bucket.")
    base = job_directory(job)
    path = os.path.join(base, step_dirname(step)) if base else ""  # bucket only: S3 prefix
    with transaction.atomic():
        CheckpointJob.objects.select_for_update().get(pk=job.pk)
        version = CheckpointVersion.objects.select_for_update().filter(job=job, step=step).first()
        if version is not None and version.state == V.WRITING:
            return version, False
        if version is not None and version.state not in (V.ABORTED, V.DELETED):
            raise Conflict(f"Step {step} of {job.name} is already {version.state}; "
                           "save under a new step.")
        created = version is None
        if version is None:
            version = CheckpointVersion(job=job, step=step)
        else:
            _clear_directory(version.path)
        version.state, version.tier, version.format = V.WRITING, "hot", "api"
        version.path, version.cold_path = path, ""
        version.s3_prefix = s3_prefix(job, step_dirname(step))
        version.manifest, version.size_bytes, version.error = [], 0, ""
        version.created_at, version.committed_at = timezone.now(), None
        version.superseded_at = version.deleted_at = None
        version.save()
        if path:
            os.makedirs(path, exist_ok=True)
    return version, created


# -- commit --------------------------------------------------------------------------------

def s3_config() -> dict | None:
    """Where the plane reads checkpoints on S3: STRATA_CHECKPOINT_S3 when set, else the
    object service's own gateway with the plane's system key."""
    return getattr(settings, "STRATA_CHECKPOINT_S3", None) or plane_s3_config()


def _s3_source(s3_prefix: str) -> sources.S3Source:
    """The objects under `s3_prefix`, through the S3 endpoint of `s3_config`
    (`sources.S3NotConfigured` when none is known)."""
    return sources.source_for(s3_prefix, s3_config())


def require_bucket(name: str) -> None:
    """Refuse a bucket the plane cannot keep checkpoints in: one that does not exist or a
    name S3 cannot take (Invalid), no S3 gateway running or answering (Unavailable)."""
    try:
        client = _s3_source(f"s3://{name}/").client
    except sources.S3NotConfigured as exc:
        raise Unavailable(str(exc), code="s3_not_configured") from None
    with sources.plain_errors(name, missing=Invalid):
        client.head_bucket(Bucket=name)


@contextlib.contextmanager
def job_objects(job: CheckpointJob):
    """The objects under the job's prefix `s3://<bucket>/<job>/` as a source (its steps are
    `child(name)`), S3's errors inside the block raised as domain errors; None when the job
    has no bucket or no S3 endpoint is known."""
    config = s3_config() if job.bucket else None
    if not config:
        yield None
        return
    with sources.plain_errors(job.bucket):
        yield sources.source_for(f"s3://{job.bucket}/{job.name}/", config)


def shard_source(version: CheckpointVersion, location: str = ""):
    """Where a version's shards are: its directory (`path`) or the objects under its S3
    prefix (`s3`); by default the directory when the job has a file system."""
    location = location or ("path" if version.path else "s3")
    if location == "path":
        if not version.path:
            raise Conflict(f"Version {version} has no directory: its job has no file system.")
        return sources.DirectorySource(version.path)
    if not version.s3_prefix:
        raise Conflict(f"Version {version} has no S3 prefix: its job has no bucket.")

    try:
        return _s3_source(version.s3_prefix)
    except sources.S3NotConfigured as exc:
        raise Conflict(str(exc)) from exc


def _space_left(version: CheckpointVersion, source, problems: list) -> str:
    """The likely reason shards are short or missing when the file system holding them has
    no room left for what is missing (its writers got ENOSPC); "" otherwise."""
    if not isinstance(source, sources.DirectorySource) or not any(
            p.problem in ("short", "missing") for p in problems):
        return ""
    try:
        st = os.statvfs(version.path)
    except OSError:
        return ""
    free = st.f_bavail * st.f_frsize
    if free >= FULL_BELOW_BYTES:
        return ""
    return (f"The file system holding it is full ({free} bytes free): its writers ran out of "
            "space. Free space or grow the pool, write the missing shards again and commit.")


def commit_version(version: CheckpointVersion, manifest, *, fmt: str = "",
                   location: str = "") -> CheckpointVersion:
    """Verify every shard, then mark the version committed and move latest, atomically.

    Raises BadManifest (400), IncompleteCheckpoint (409, naming every bad shard) or
    Conflict (409, not writing); a version already committed is returned unchanged.
    """
    if version.state in CheckpointVersion.RESTORABLE:
        return version
    if version.state != V.WRITING:
        raise Conflict(f"Version {version} is {version.state}; only a writing version commits.")
    try:
        clean = verify.validate_manifest(manifest)
    except verify.ManifestError as exc:
        raise BadManifest(str(exc)) from exc
    with sources.plain_errors(version.job.bucket):
        source = shard_source(version, location)
        problems = verify.check_manifest(source, clean)
    if problems:
        raise IncompleteCheckpoint(problems, _space_left(version, source, problems))
    with transaction.atomic():
        job = CheckpointJob.objects.select_for_update().get(pk=version.job_id)
        version = CheckpointVersion.objects.select_for_update().get(pk=version.pk)
        if version.state in CheckpointVersion.RESTORABLE:
            return version
        if version.state != V.WRITING:
            raise Conflict(f"Version {version} became {version.state} while it was verified.")
        now = timezone.now()
        version.state, version.committed_at, version.error = V.COMMITTED, now, ""
        version.manifest, version.size_bytes = clean, sum(e["size"] for e in clean)
        version.location = "path" if isinstance(source, sources.DirectorySource) else "s3"
        if fmt:
            version.format = fmt
        latest = job.latest
        if latest is not None and latest.step > version.step:
            version.state, version.superseded_at = V.SUPERSEDED, now  # an older step, late
        else:
            CheckpointVersion.objects.filter(job=job, state=V.COMMITTED).exclude(
                pk=version.pk).update(state=V.SUPERSEDED, superseded_at=now)
            job.latest = version
            job.save(update_fields=["latest", "updated_at"])
        version.save()
    return version


def abort_version(version: CheckpointVersion, reason: str = "aborted by the client") -> bool:
    """Abort a writing version (its files stay until retention removes them)."""
    return bool(CheckpointVersion.objects.filter(pk=version.pk, state=V.WRITING).update(
        state=V.ABORTED, error=reason[:1000]))


def abort_stale(now=None) -> list:
    """Abort every version left writing longer than its job's writing timeout."""
    now = now or timezone.now()
    stale = CheckpointVersion.objects.filter(
        state=V.WRITING, created_at__lte=now - F("job__writing_timeout"))
    aborted = []
    for version in stale.select_related("job"):
        reason = (f"not committed within {version.job.writing_timeout} of its start; "
                  "never offered for restore")
        if abort_version(version, reason):
            aborted.append(version.pk)
    return aborted


def latest_version(job: CheckpointJob) -> CheckpointVersion | None:
    """The newest committed version, never a writing or aborted one."""
    latest = job.latest
    if latest is not None and latest.state == V.COMMITTED:
        return latest
    return (CheckpointVersion.objects.filter(job=job, state=V.COMMITTED)
            .order_by("-step").first())


# -- leases and pins -----------------------------------------------------------------------

def take_lease(version: CheckpointVersion, *, ttl_seconds: int, holder: str = "", user=None):
    """(lease, prewarm job or None): hold a restorable version; a cold one starts pre-warm
    (a warming one answers the pre-warm already running). The version's row lock orders
    this against a tier-down's switch: a lease taken first keeps the hot copy."""
    with transaction.atomic():
        version = CheckpointVersion.objects.select_for_update().get(pk=version.pk)
        if not version.restorable:
            raise Conflict(f"Version {version} is {version.state}; only committed or "
                           "superseded versions can be leased.")
        lease = CheckpointLease.objects.create(
            version=version, holder=holder,
            expires_at=timezone.now() + timedelta(seconds=ttl_seconds))
        job = prewarm.request_prewarm(version, user=user) if version.tier != "hot" else None
    return lease, job


def renew_lease(lease: CheckpointLease, ttl_seconds: int) -> CheckpointLease:
    if not lease.active:
        raise Conflict(f"Lease {lease.pk} has expired; take a new one.")
    lease.expires_at = timezone.now() + timedelta(seconds=ttl_seconds)
    lease.save(update_fields=["expires_at"])
    return lease


def release_lease(lease: CheckpointLease) -> None:
    lease.delete()


def forget_old_leases(older_than: timedelta = timedelta(days=1)) -> int:
    """Delete leases that expired long ago (expired ones already hold nothing)."""
    return CheckpointLease.objects.filter(
        expires_at__lt=timezone.now() - older_than).delete()[0]


def set_pin(version: CheckpointVersion, pinned: bool, reason: str = "") -> CheckpointVersion:
    """Pin (or unpin) a version. When its objects are in a bucket with Object Lock, the pin is
    also an S3 legal hold on each of them: no S3 user, lifecycle rule or script can delete
    them while it holds (unpinning lifts the holds, so retention can delete them again)."""
    with transaction.atomic():
        version = CheckpointVersion.objects.select_for_update().get(pk=version.pk)
        if pinned and version.state in (V.DELETING, V.DELETED, V.ABORTED):
            raise Conflict(f"Version {version} is {version.state}; it cannot be pinned.")
        version.pinned, version.pin_reason = pinned, reason[:200] if pinned else ""
        version.save(update_fields=["pinned", "pin_reason"])
        if version.s3_prefix and version.state != V.DELETED:
            try:
                source = _s3_source(version.s3_prefix)
            except sources.S3NotConfigured:
                return version  # no S3 endpoint known: a pin of the catalog only
            with sources.plain_errors(version.job.bucket):
                source.legal_hold(pinned)  # a failure un-does the pin
    return version


def delete_job(job: CheckpointJob) -> None:
    """Remove a job from the catalog once none of its versions hold data any more."""
    held = job.versions.exclude(state__in=[V.DELETED, V.ABORTED]).order_by("step")
    if held.exists():
        steps = ", ".join(str(s) for s in held.values_list("step", flat=True)[:10])
        raise Conflict(f"Checkpoint job {job.name} still has versions at steps {steps}; "
                       "unpin them and let retention delete them first.")
    job.delete()
