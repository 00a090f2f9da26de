"""Data protection: snapshot schedules, replication peers and replications, replicas
received from peers, backup targets, backups and their catalog of restore points, and
bucket replications (to a bucket on an S3 endpoint given as a backup target)."""
from django.db import models
from django.utils import timezone

from plane.models import Timestamped
from plane.secrets import SealedTextField
from services.storage.models import FileSystem, NameField, Volume


def _age(when):
    """Seconds since ``when`` (never negative), None without one: a replication's lag."""
    return None if when is None else max(0.0, (timezone.now() - when).total_seconds())


class SourceMixin(models.Model):
    """A protected object: exactly one of a file system or a volume."""

    filesystem = models.ForeignKey(FileSystem, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="+")
    volume = models.ForeignKey(Volume, null=True, blank=True, on_delete=models.CASCADE,
                               related_name="+")

    class Meta:
        abstract = True

    @property
    def source(self):
        return self.filesystem or self.volume

    @property
    def kind(self) -> str:
        return "filesystem" if self.filesystem_id else "volume"

    def source_snapshots(self):
        return self.source.snapshots.all()


class SnapshotSchedule(SourceMixin, Timestamped):
    """Take a snapshot on a cron expression or every N minutes; prune by retention.

    The source is a file system, a volume or an S3 ``bucket`` (by name: bucket snapshots are
    manifests of versions kept by the S3 gateway, see ``bucket_snapshots``)."""

    name = NameField(unique=True)
    bucket = models.CharField(max_length=63, blank=True, default="")
    cron = models.CharField(max_length=100, blank=True, default="")
    every_minutes = models.PositiveIntegerField(null=True, blank=True)
    keep_last = models.PositiveIntegerField(default=0)
    keep_hourly = models.PositiveIntegerField(default=0)
    keep_daily = models.PositiveIntegerField(default=0)
    keep_weekly = models.PositiveIntegerField(default=0)
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField("django_celery_beat.PeriodicTask", null=True,
                                         blank=True, on_delete=models.SET_NULL, related_name="+")
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_snapshot = models.CharField(max_length=63, blank=True, default="")
    last_error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["name"]

    @property
    def snapshot_prefix(self) -> str:
        return f"auto-{self.name}-"

    @property
    def kind(self) -> str:
        return "bucket" if self.bucket else super().kind

    @property
    def source_label(self) -> str:
        return f"bucket {self.bucket}" if self.bucket else self.source.name

    def __str__(self):
        return self.name


class ReplicationPeer(models.Model):
    """Another Strata appliance: its URL and an API token of an operator there."""

    name = NameField(unique=True)
    url = models.URLField(max_length=300)
    token = SealedTextField()  # sealed in the database (fields.py); never returned by the API
    state = models.CharField(max_length=16, default="online")  # online | unreachable
    error = models.TextField(blank=True, default="")
    remote_user = models.CharField(max_length=150, blank=True, default="")
    last_checked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Replication(SourceMixin):
    """Send incremental snapshots of a file system or volume to a peer at an interval."""

    name = NameField(unique=True)
    peer = models.ForeignKey(ReplicationPeer, on_delete=models.PROTECT,
                             related_name="replications")
    target_pool = models.CharField(max_length=63)
    target_name = models.CharField(max_length=63)
    every_minutes = models.PositiveIntegerField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField("django_celery_beat.PeriodicTask", null=True,
                                         blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=16, default="new")  # new | ok | error
    error = models.TextField(blank=True, default="")
    last_snapshot = models.CharField(max_length=63, blank=True, default="")
    last_snapshot_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_bytes = models.BigIntegerField(default=0)
    # a transfer cut short: resumed by the next run from where the peer's copy stops
    pending_snapshot = models.CharField(max_length=63, blank=True, default="")
    pending_parent = models.CharField(max_length=63, blank=True, default="")
    pending_transfer = models.CharField(max_length=64, blank=True, default="")
    # a failback under way (see failback.py): {"phase", "snapshot", "parent", "transfer",
    # "preserved"}; empty when none is
    failback = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    @property
    def snapshot_prefix(self) -> str:
        return f"repl-{self.name}-"

    def lag_seconds(self):
        """Recovery point: how old the newest data on the replica is (None before the first)."""
        return _age(self.last_snapshot_at)

    def __str__(self):
        return self.name


class Replica(models.Model):
    """On the receiving appliance: a file system or volume that a peer replicates into.

    Its snapshots are the received ones; ``promoted`` once failover made a writable copy,
    after which further receives are refused (no split brain)."""

    kind = models.CharField(max_length=16)  # filesystem | volume
    pool = models.CharField(max_length=63)
    name = NameField(unique=True)
    source_hint = models.CharField(max_length=300, blank=True, default="")
    last_snapshot = models.CharField(max_length=63, blank=True, default="")
    last_received_at = models.DateTimeField(null=True, blank=True)
    promoted_to = models.CharField(max_length=63, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class BackupTarget(models.Model):
    """An S3 endpoint, bucket and prefix that backups are written to."""

    name = NameField(unique=True)
    endpoint_url = models.URLField(max_length=300)
    region = models.CharField(max_length=40, default="us-east-1")
    access_key = models.CharField(max_length=200)
    secret_key = SealedTextField()  # sealed in the database (fields.py); never returned
    bucket = models.CharField(max_length=63)
    prefix = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Backup(SourceMixin):
    """Back a file system or volume up to a target: full first, then incrementals.

    The catalog outlives the source: deleting the file system or volume leaves the backup
    (``source`` becomes None, ``source_name`` and ``source_kind`` stay) so it can be restored."""

    filesystem = models.ForeignKey(FileSystem, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    volume = models.ForeignKey(Volume, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    source_name = models.CharField(max_length=63, blank=True, default="")
    source_kind = models.CharField(max_length=16, blank=True, default="")
    name = NameField(unique=True)
    target = models.ForeignKey(BackupTarget, on_delete=models.PROTECT, related_name="backups")
    every_minutes = models.PositiveIntegerField(null=True, blank=True)
    full_every = models.PositiveIntegerField(default=0)  # a new full after N incrementals (0: never)
    periodic_task = models.OneToOneField("django_celery_beat.PeriodicTask", null=True,
                                         blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=16, default="new")
    error = models.TextField(blank=True, default="")
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    @property
    def snapshot_prefix(self) -> str:
        return f"backup-{self.name}-"

    def __str__(self):
        return self.name


class RestorePoint(models.Model):
    """One backed-up snapshot in the catalog: a full stream or an increment on ``parent``."""

    backup = models.ForeignKey(Backup, on_delete=models.CASCADE, related_name="restore_points")
    snapshot = models.CharField(max_length=63)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.RESTRICT,
                               related_name="children")
    kind = models.CharField(max_length=16)  # filesystem | volume
    key = models.CharField(max_length=500)  # the manifest's object key
    chunks = models.PositiveIntegerField(default=0)
    stream_bytes = models.BigIntegerField(default=0)
    stored_bytes = models.BigIntegerField(default=0)
    stream_sha256 = models.CharField(max_length=64)
    tree_sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["backup", "snapshot"],
                                               name="uniq_restore_point")]

    @property
    def full(self) -> bool:
        return self.parent_id is None

    def chain(self) -> list:
        """The full restore point and the increments up to this one, oldest first."""
        out, rp = [], self
        while rp is not None:
            out.append(rp)
            rp = rp.parent
        return out[::-1]

    def __str__(self):
        return f"{self.backup.name}@{self.snapshot}"


class BucketReplication(models.Model):
    """Copy the new object versions of a local bucket to the bucket (and under the prefix)
    of an S3 endpoint, described by a backup target: another Strata's gateway or any S3.

    ``watermark`` is the S3 gateway's sequence number up to which every version and delete
    marker has been copied; ``synced_at`` is when that point was (the recovery point)."""

    name = NameField(unique=True)
    bucket = models.CharField(max_length=63)
    target = models.ForeignKey(BackupTarget, on_delete=models.PROTECT,
                               related_name="bucket_replications")
    every_minutes = models.PositiveIntegerField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    periodic_task = models.OneToOneField("django_celery_beat.PeriodicTask", null=True,
                                         blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=16, default="new")  # new | ok | error
    error = models.TextField(blank=True, default="")
    watermark = models.BigIntegerField(default=0)
    synced_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_versions = models.PositiveIntegerField(default=0)
    last_deletes = models.PositiveIntegerField(default=0)
    last_bytes = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def lag_seconds(self):
        """Recovery point: how old the newest write known to be on the target is."""
        return _age(self.synced_at)

    def __str__(self):
        return self.name
