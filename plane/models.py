"""Jobs with progress and the audit log, and the abstract bases other models share."""
from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from plane.cli.output import transfer_line


class Timestamped(models.Model):
    """When a row was created and last saved (set by Django): the base of every model that
    records both."""

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Job(models.Model):
    """A long operation run by a Celery worker, with its progress and outcome."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = (State.SUCCEEDED, State.FAILED, State.CANCELLED)

    kind = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    progress = models.FloatField(default=0.0)
    # bytes moved so far and in all (null: the job moves no bytes or does not know yet)
    bytes_done = models.BigIntegerField(null=True, blank=True)
    bytes_total = models.BigIntegerField(null=True, blank=True)
    message = models.CharField(max_length=500, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    target_type = models.CharField(max_length=32, blank=True, default="")
    target_name = models.CharField(max_length=128, blank=True, default="")
    params = models.JSONField(default=dict, blank=True)
    cancel_requested = models.BooleanField(default=False)
    node = models.CharField(max_length=63, blank=True, default="")  # the node whose worker ran it
    task = models.CharField(max_length=128, blank=True, default="")  # the Celery task that runs it
    heartbeat_at = models.DateTimeField(null=True, blank=True)  # its worker's last sign of life
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"job {self.pk} {self.kind} {self.state} {self.progress:.0f}%"

    @property
    def finished(self) -> bool:
        return self.state in self.FINISHED

    def rate_bytes_per_s(self, now=None) -> float | None:
        """Bytes done per second since the job started (until it finished)."""
        if self.bytes_done is None or self.started_at is None:
            return None
        end = self.finished_at or now or timezone.now()
        elapsed = (end - self.started_at).total_seconds()
        return self.bytes_done / elapsed if elapsed > 0 else None

    def transfer_line(self) -> str:
        """"1.5 GiB of 4.0 GiB, 30.2 MiB/s, ETA 85 s" ("" for a job that moves no bytes)."""
        return transfer_line(self.bytes_done, self.bytes_total, self.rate_bytes_per_s(),
                             self.eta_seconds())

    def eta_seconds(self, now=None) -> float | None:
        """Seconds left at the current rate, for a running job that knows its total."""
        rate = self.rate_bytes_per_s(now)
        if self.state != self.State.RUNNING or not rate or self.bytes_total is None:
            return None
        return max(0, self.bytes_total - self.bytes_done) / rate


class AuditEvent(models.Model):
    """One mutating API call: who, what, when and the result."""

    time = models.DateTimeField(auto_now_add=True, db_index=True)
    username = models.CharField(max_length=150, blank=True, default="")
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    action = models.CharField(max_length=200)
    status_code = models.PositiveSmallIntegerField()
    result = models.CharField(max_length=16)  # ok | denied | error
    detail = models.JSONField(default=dict, blank=True)
    remote_addr = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-id"]


class MetricSample(models.Model):
    """Cumulative I/O counters of one pool's devices at one moment (for charts and /metrics)."""

    time = models.DateTimeField(db_index=True)
    pool = models.CharField(max_length=63)
    read_bytes = models.BigIntegerField()
    write_bytes = models.BigIntegerField()
    reads = models.BigIntegerField()
    writes = models.BigIntegerField()
    read_ms = models.BigIntegerField()
    write_ms = models.BigIntegerField()

    class Meta:
        ordering = ["time"]


class IOBudgetSetting(models.Model):
    """One row (pk=1): the background I/O budget every worker shares (0 = unlimited)."""

    rate_mbps = models.PositiveIntegerField(default=0)
    burst_mb = models.PositiveIntegerField(default=0)
    class_rates_mbps = models.JSONField(default=dict, blank=True)  # {"backup": 50, ...}
    foreground_share = models.FloatField(
        default=0.1, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "tiering_iobudgetsetting"  # created by the tiering app; moved here

    @classmethod
    def get(cls) -> "IOBudgetSetting":
        return cls.objects.get_or_create(pk=1)[0]


class ApiToken(models.Model):
    """A user's API token, kept only as the SHA-256 digest of its key: the key itself is
    shown once, in the answer that makes it (``plane.tokens``), as an S3 secret is."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="api_token")
    digest = models.CharField(max_length=64, unique=True)  # hex SHA-256 of the key
    prefix = models.CharField(max_length=8)  # the key's first characters, to tell tokens apart
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["user__username"]

    def __str__(self):
        return f"token {self.prefix}... of {self.user}"
