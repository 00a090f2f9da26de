"""Vector collections as the plane sees them: one row per collection, its snapshots and builds.

The vectors themselves live in the engine (`vector.engine`), in a file system of the
collection's pool (`filesystem.path`/data); the row records the definition and the figures
last reported by the process that serves the collection.
"""
from django.db import models

from plane.models import Timestamped
from services.storage.models import FileSystem, Pool
from services.storage.service import KeptByService

# The engine's name rule (vector/engine/spec.py), shortened so that "vector-<name>" is still
# a valid file-system name (63 characters at most).
NAME_RE = r"^[a-z0-9][a-z0-9_-]{0,55}$"
NAME_HELP = ("Names are 1-56 characters: lower-case letters, digits, '_' and '-', "
             "starting with a letter or digit.")


def refuse_filesystem_delete(collector, field, sub_objs, using):
    """``on_delete`` of a collection's file system: a 409 ``kept_by_service`` naming the
    collection (PROTECT would surface as a 500)."""
    fs = getattr(sub_objs[0], field.name)
    raise KeptByService(fs, f"deleting it while collection {sub_objs[0].name} lives there "
                            "(delete the collection instead)")


class VectorCollection(Timestamped):
    """A faiss collection: definition, where it lives, and its last reported size."""

    name = models.CharField(max_length=56, unique=True)
    dimension = models.PositiveIntegerField()
    metric = models.CharField(max_length=8)
    index_type = models.CharField(max_length=16)
    params = models.JSONField(default=dict, blank=True)
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="vector_collections")
    filesystem = models.OneToOneField(FileSystem, on_delete=refuse_filesystem_delete,
                                      related_name="vector_collection")
    vector_count = models.BigIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    index_state = models.CharField(max_length=16, default="ready")

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def data_path(self) -> str:
        """The engine's directory for this collection."""
        return f"{self.filesystem.path}/data"

    @property
    def snapshots_path(self) -> str:
        return f"{self.filesystem.path}/snapshots"


class VectorSnapshot(models.Model):
    """A consistent copy of a collection (checkpoint + sealed WAL) on its file system."""

    collection = models.ForeignKey(VectorCollection, on_delete=models.CASCADE,
                                   related_name="snapshots")
    name = models.CharField(max_length=56)
    path = models.CharField(max_length=500)
    vector_count = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["collection", "name"],
                                               name="uniq_vector_snapshot")]

    def __str__(self):
        return f"{self.collection.name}@{self.name}"


class IndexBuild(models.Model):
    """An index train/rebuild running in the process that serves the collection.

    The serving (web) process writes progress here; the Celery job that watches it mirrors
    the progress onto its Job row and sets `cancel_requested` when the job is cancelled.
    `heartbeat` lets the watcher notice a serving process that died mid-build.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    collection = models.ForeignKey(VectorCollection, on_delete=models.CASCADE,
                                   related_name="builds")
    job_id = models.BigIntegerField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    progress = models.FloatField(default=0.0)
    message = models.CharField(max_length=500, blank=True, default="")
    error = models.TextField(blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def finished(self) -> bool:
        return self.state in (self.State.SUCCEEDED, self.State.FAILED, self.State.CANCELLED)
