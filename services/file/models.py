"""Desired state of the file service: NFS exports, SMB shares and SMB users.

Rows hold what the user asked for; `services.file.service` renders them into the daemons'
configs through `services.file.runtime` and records the outcome on the row: ``state``
(``online``: served as asked; ``pending``: config written, the daemon is not running;
``error``: not applied, ``error`` says why) and ``applied`` (what the daemon serves for this
row now: after a refused change the previous version keeps serving).
"""
from django.db import models

from plane.models import Timestamped
from services.storage.models import FileSystem


class ApplyState(models.TextChoices):
    ONLINE = "online"
    PENDING = "pending"
    ERROR = "error"


class Applied(Timestamped):
    """What applying the row to its daemon gave: ``state`` and, on ``error``, why."""

    state = models.CharField(max_length=16, choices=ApplyState.choices,
                             default=ApplyState.PENDING)
    error = models.TextField(blank=True, default="")

    class Meta:
        abstract = True


class NfsExport(Applied):
    """An NFSv4 export of a file system (or a directory inside it) at a pseudo path."""

    filesystem = models.ForeignKey(FileSystem, on_delete=models.DO_NOTHING,
                                   related_name="nfs_exports", db_constraint=True)
    path = models.CharField(max_length=500, blank=True, default="",
                            help_text="directory inside the file system; empty: its root")
    pseudo = models.CharField(max_length=500, unique=True)
    clients = models.JSONField(default=list)   # [{address, access, squash, anonymous_uid?...}]
    applied = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["pseudo"]

    def __str__(self):
        return self.pseudo

    @property
    def name(self) -> str:
        return self.pseudo


class SmbShare(Applied):
    """An SMB3 share of a file system (or a directory inside it)."""

    name = models.CharField(max_length=80, unique=True)
    filesystem = models.ForeignKey(FileSystem, on_delete=models.DO_NOTHING,
                                   related_name="smb_shares")
    path = models.CharField(max_length=500, blank=True, default="")
    read_only = models.BooleanField(default=False)
    valid_users = models.JSONField(default=list, blank=True)
    encrypt = models.BooleanField(default=False)
    applied = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class SmbUser(Applied):
    """An SMB user: a Unix account (no home, no shell) kept by Strata plus a Samba password.

    The password is never stored here; it lives hashed in Samba's passdb in the data
    directory. ``unix_created`` says Strata created the Unix account (and may delete it).
    """

    username = models.CharField(max_length=32, unique=True)
    unix_created = models.BooleanField(default=False)

    class Meta:
        ordering = ["username"]

    def __str__(self):
        return self.username

    @property
    def name(self) -> str:
        return self.username
