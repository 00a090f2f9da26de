"""Desired state of the block service: hosts, host groups and exports of volumes.

Rows hold what the user asked for; :mod:`services.block.service` makes the daemons match
(through :class:`services.block.transports.BlockRuntime`) and records the outcome on the
export row: ``state`` (online | error), ``error`` (the daemon's message) and ``connection``
(how a client reaches it).
"""
from django.db import models

from plane.models import Timestamped
from plane.secrets import SealedTextField
from services.storage.models import NameField, Volume


class Host(Timestamped):
    """A client machine: its iSCSI initiator IQN and/or NVMe host NQN, address, CHAP login,
    and the DH-HMAC-CHAP key its NVMe host authenticates with."""

    name = NameField(unique=True)
    iqn = models.CharField(max_length=223, blank=True, default="")
    nqn = models.CharField(max_length=223, blank=True, default="")
    address = models.CharField(max_length=64, blank=True, default="")
    chap_user = models.CharField(max_length=64, blank=True, default="")
    chap_secret = SealedTextField(blank=True, default="")  # sealed in the database
    dhchap_key = SealedTextField(blank=True, default="")   # sealed in the database

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class HostGroup(Timestamped):
    """Hosts that see the same LUNs: one iSCSI target per group; its ACL and CHAP accounts."""

    name = NameField(unique=True)
    hosts = models.ManyToManyField(Host, blank=True, related_name="groups")
    mutual_chap_user = models.CharField(max_length=64, blank=True, default="")
    mutual_chap_secret = SealedTextField(blank=True, default="")  # sealed in the database

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class BlockExport(Timestamped):
    """A volume made reachable over one protocol, to one host group (or to anyone)."""

    class Protocol(models.TextChoices):
        ISCSI = "iscsi"
        NBD = "nbd"
        VHOST_USER_BLK = "vhost-user-blk"
        NVMF = "nvmf"

    class State(models.TextChoices):
        ONLINE = "online"
        ERROR = "error"
        PENDING = "pending"      # recorded by a plane without block daemons; nodes apply it

    QOS_FIELDS = ("iops_read", "iops_write", "iops_total", "bps_read", "bps_write", "bps_total")

    # deleting an exported volume is refused by a pre_delete receiver (signals.py) with a 409;
    # CASCADE (not PROTECT) so that Django's collector does not answer first with a 500
    volume = models.ForeignKey(Volume, on_delete=models.CASCADE, related_name="block_exports")
    protocol = models.CharField(max_length=16, choices=Protocol.choices)
    host_group = models.ForeignKey(HostGroup, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="exports")
    read_only = models.BooleanField(default=False)
    # Open to every initiator that reaches the address: an explicit choice (iSCSI and NVMe-oF
    # exports otherwise need a host group; NBD has no per-host control at all).
    allow_any = models.BooleanField(default=False)
    iops_read = models.PositiveBigIntegerField(default=0)
    iops_write = models.PositiveBigIntegerField(default=0)
    iops_total = models.PositiveBigIntegerField(default=0)
    bps_read = models.PositiveBigIntegerField(default=0)
    bps_write = models.PositiveBigIntegerField(default=0)
    bps_total = models.PositiveBigIntegerField(default=0)
    connection = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ONLINE)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["id"]

    def __str__(self):
        return self.export_id

    @property
    def export_id(self) -> str:
        """The runtime's id of this export (also the NBD export name)."""
        return f"exp-{self.pk}"

    def qos(self) -> dict:
        return {f: getattr(self, f) for f in self.QOS_FIELDS}

    def has_qos(self) -> bool:
        return any(self.qos().values())
