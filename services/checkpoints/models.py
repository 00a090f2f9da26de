"""The checkpoint catalog: training jobs, their versions per step, leases and pins.

A version is `writing` until a verified commit makes it `committed` (and the job's latest);
a newer commit makes it `superseded`; retention takes an unreferenced superseded version
through `deleting` to `deleted`. A version never committed within the job's writing timeout
becomes `aborted` and is never offered for restore. `tier` says where its bytes are.
"""
from datetime import timedelta

from django.db import models
from django.utils import timezone

from plane.models import Job, Timestamped
from plumbing.errors import Conflict
from services.storage.models import FileSystem, NameField, Pool

ACTIVE_JOB = (Job.State.PENDING, Job.State.RUNNING)


def refuse_while_used(collector, field, sub_objs, using):
    """on_delete for storage a checkpoint job uses: a 409 naming the jobs, not a 500."""
    target = field.remote_field.model._meta.verbose_name
    names = ", ".join(sorted(job.name for job in sub_objs))
    raise Conflict(f"This {target} is used by checkpoint job(s) {names}; delete those "
                   "checkpoint jobs (or change their tiering) first.")


class CheckpointJob(Timestamped):
    """A training job whose checkpoints Strata keeps: where they go and what to keep."""

    name = NameField(unique=True)
    tenant = models.CharField(max_length=63, blank=True, default="")
    filesystem = models.ForeignKey(FileSystem, null=True, blank=True, on_delete=refuse_while_used,
                                   related_name="checkpoint_jobs")
    bucket = models.CharField(max_length=63, blank=True, default="")
    # retention: keep the last N committed, every K-th step, anything newer than a duration
    keep_last = models.PositiveIntegerField(default=3)
    keep_every = models.PositiveIntegerField(null=True, blank=True)
    keep_newer_than = models.DurationField(null=True, blank=True)
    # tiering (tierdown.py): superseded versions move to `capacity_pool` once superseded
    # for `tier_after`
    tier_after = models.DurationField(null=True, blank=True)
    capacity_pool = models.ForeignKey(Pool, null=True, blank=True, on_delete=refuse_while_used,
                                      related_name="+")
    writing_timeout = models.DurationField(default=timedelta(hours=1))
    latest = models.ForeignKey("CheckpointVersion", null=True, blank=True,
                               on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class CheckpointVersion(models.Model):
    """One checkpoint of a job at a training step."""

    class State(models.TextChoices):
        WRITING = "writing"
        COMMITTED = "committed"
        ABORTED = "aborted"
        SUPERSEDED = "superseded"
        DELETING = "deleting"
        DELETED = "deleted"

    class Tier(models.TextChoices):
        HOT = "hot"
        COLD = "cold"
        WARMING = "warming"

    RESTORABLE = (State.COMMITTED, State.SUPERSEDED)

    job = models.ForeignKey(CheckpointJob, on_delete=models.CASCADE, related_name="versions")
    step = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.WRITING)
    tier = models.CharField(max_length=8, choices=Tier.choices, default=Tier.HOT)
    path = models.CharField(max_length=1000, blank=True, default="")
    cold_path = models.CharField(max_length=1000, blank=True, default="")
    s3_prefix = models.CharField(max_length=1000, blank=True, default="")
    format = models.CharField(max_length=16, blank=True, default="")  # api | dcp | orbax
    location = models.CharField(max_length=8, default="path")  # where the shards are: path | s3
    manifest = models.JSONField(default=list, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    pinned = models.BooleanField(default=False)
    pin_reason = models.CharField(max_length=200, blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    committed_at = models.DateTimeField(null=True, blank=True)
    superseded_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "-step"]
        constraints = [models.UniqueConstraint(fields=["job", "step"], name="uniq_job_step")]

    def __str__(self):
        return f"{self.job.name}@{self.step}"

    @property
    def restorable(self) -> bool:
        return self.state in self.RESTORABLE

    def active_leases(self):
        return self.leases.filter(expires_at__gt=timezone.now())


class CheckpointLease(models.Model):
    """A restoring job's hold on a version until `expires_at` (renewable, releasable)."""

    version = models.ForeignKey(CheckpointVersion, on_delete=models.CASCADE,
                                related_name="leases")
    holder = models.CharField(max_length=200, blank=True, default="")
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"lease {self.pk} on {self.version} until {self.expires_at:%Y-%m-%d %H:%M:%S}"

    @property
    def active(self) -> bool:
        return self.expires_at > timezone.now()


def active_job(kind: str, version_id: int) -> Job | None:
    """The pending or running Job of `kind` (a pre-warm, a tier-down) on a version, if any."""
    return (Job.objects.filter(kind=kind, state__in=ACTIVE_JOB, params__version=version_id)
            .order_by("-id").first())
