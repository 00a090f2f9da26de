"""Desired state of the dataplane: pools, file systems, volumes and snapshots.

Rows hold what the user asked for; `services.storage.service` makes the dataplane match and
records what it found (`state`, `error`, usage) back on the row.
"""
from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from plane.models import Timestamped

NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,62}$"
name_validator = RegexValidator(
    NAME_RE,
    "Names are 1-63 characters: lower-case letters, digits, '.', '_' and '-', "
    "starting with a letter or digit.",
)


def NameField(**kwargs):
    return models.CharField(max_length=63, validators=[name_validator], **kwargs)


class State(models.TextChoices):
    ONLINE = "online"
    DEGRADED = "degraded"
    OFFLINE = "offline"
    ERROR = "error"


class Reconciled(models.Model):
    """What the last reconcile found: ``state`` and, when it is not online, ``error`` (why)."""

    state = models.CharField(max_length=16, choices=State.choices, default=State.ONLINE)
    error = models.TextField(blank=True, default="")

    class Meta:
        abstract = True


class Pool(Reconciled, Timestamped):
    """Devices of one media class grouped with a redundancy profile (a btrfs file system)."""

    class Redundancy(models.TextChoices):
        NONE = "none"
        MIRROR = "mirror"
        MIRROR3 = "mirror3"
        RAID10 = "raid10"

    class Media(models.TextChoices):
        FLASH = "flash"
        CAPACITY = "capacity"

    MIN_DEVICES = {"none": 1, "mirror": 2, "mirror3": 3, "raid10": 4}

    name = NameField(unique=True)
    driver = models.CharField(max_length=16)
    devices = models.JSONField(default=list, blank=True)  # [{"path", "fault_domain"}]
    # local/directory/spdk: one of Redundancy; ceph: replicated:N or ec:K+M
    redundancy = models.CharField(max_length=16, default="none")
    media = models.CharField(max_length=8, choices=Media.choices, default="flash")
    mountpoint = models.CharField(max_length=500, blank=True, default="")
    # the node whose disks hold it (local, directory, spdk); ceph pools: any node serves them
    node = models.CharField(max_length=63, blank=True, default="")
    size_bytes = models.BigIntegerField(default=0)
    used_bytes = models.BigIntegerField(default=0)
    free_bytes = models.BigIntegerField(default=0)
    device_status = models.JSONField(default=list, blank=True)
    features_off = models.JSONField(default=dict, blank=True)
    # ceph pools: {"conf", "client", "keyring", "failure_domain", "min_size"}
    ceph = models.JSONField(default=dict, blank=True)
    # what the driver says beyond the state (ceph: status, reasons, failed domains, recovery)
    health_detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def save(self, *args, **kwargs):
        if not self.node and self.driver != "ceph":   # made here: on this node's disks
            self.node = settings.STRATA_NODE_NAME
        super().save(*args, **kwargs)


class PoolObject(Reconciled, Timestamped):
    """What file systems and volumes share: a name, a pool, where the bytes are, usage, the
    snapshot it was cloned from, and the state the last reconcile recorded."""

    name = NameField(unique=True)
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="%(class)ss")
    path = models.CharField(max_length=500, blank=True, default="")
    used_bytes = models.BigIntegerField(default=0)
    origin = models.ForeignKey("Snapshot", null=True, blank=True, on_delete=models.PROTECT,
                               related_name="%(class)s_clones")

    class Meta:
        abstract = True
        ordering = ["name"]

    def __str__(self):
        return self.name


class FileSystem(PoolObject):
    """A directory tree with a quota (a btrfs subvolume on the local driver)."""

    quota_bytes = models.BigIntegerField(null=True, blank=True)
    # The service that made it for its own use ("object": the S3 gateway's data or cold
    # tier; "checkpoints": cold checkpoint versions; "vector": a collection's vectors and
    # index); empty for a user's file system.
    kept_by = models.CharField(max_length=32, blank=True, default="")
    # Who may write its root, as on a dataset of a storage appliance: POSIX owner and group
    # (a user or group name of this host, or a number) and mode (octal); empty: as made
    # (root, 0755).
    owner = models.CharField(max_length=32, blank=True, default="")
    group = models.CharField(max_length=32, blank=True, default="")
    mode = models.CharField(max_length=4, blank=True, default="")


class Volume(PoolObject):
    """A thin block volume (a sparse file on the local driver)."""

    size_bytes = models.BigIntegerField()
    thin = models.BooleanField(default=True)


# the model of each kind of pool object ("filesystem", "volume": Snapshot's fields too)
OBJECT_MODELS = {"filesystem": FileSystem, "volume": Volume}


class Snapshot(Reconciled):
    """A read-only point-in-time copy of a file system or a volume."""

    name = NameField()
    filesystem = models.ForeignKey(
        FileSystem, null=True, blank=True, on_delete=models.CASCADE, related_name="snapshots"
    )
    volume = models.ForeignKey(
        Volume, null=True, blank=True, on_delete=models.CASCADE, related_name="snapshots"
    )
    path = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["filesystem", "name"], name="uniq_fs_snapshot"),
            models.UniqueConstraint(fields=["volume", "name"], name="uniq_volume_snapshot"),
            models.CheckConstraint(
                condition=models.Q(filesystem__isnull=False, volume__isnull=True)
                | models.Q(filesystem__isnull=True, volume__isnull=False),
                name="snapshot_of_one_source",
            ),
        ]

    def __str__(self):
        return f"{self.source.name}@{self.name}"

    @property
    def kind(self) -> str:
        return "filesystem" if self.filesystem_id else "volume"

    @property
    def source(self):
        return self.filesystem or self.volume

    @property
    def pool(self) -> Pool:
        return self.source.pool

    def clones(self) -> list:
        return list(self.filesystem_clones.all()) + list(self.volume_clones.all())


class CephClientKey(Timestamped):
    """A cephx key a host uses to mount a file system of a ceph pool natively (kernel
    client, ceph-fuse, libcephfs), limited to that file system (dataplane.ceph.clientkeys).
    Ceph holds the secret; the row holds where it reaches, so that the mount commands can
    be shown again (without the secret) and the key revoked."""

    filesystem = models.ForeignKey(FileSystem, on_delete=models.PROTECT,
                                   related_name="ceph_keys")
    name = NameField()
    entity = models.CharField(max_length=200, unique=True)   # client.strata.<fs>.<name>
    read_only = models.BooleanField(default=False)
    caps = models.JSONField(default=dict)
    path = models.CharField(max_length=500)                   # in the CephFS
    ceph_filesystem = models.CharField(max_length=100)        # the CephFS's name
    monitors = models.JSONField(default=list)
    msgr2_only = models.BooleanField(default=False)

    class Meta:
        ordering = ["filesystem", "name"]
        constraints = [models.UniqueConstraint(fields=["filesystem", "name"],
                                               name="uniq_fs_ceph_key")]

    def __str__(self):
        return self.entity
