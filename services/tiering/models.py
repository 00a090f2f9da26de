"""The appliance's background I/O budget, and the record of tier moves."""
from django.db import models


class TierMove(models.Model):
    """Moving a file system or volume to another pool, keeping its name."""

    kind = models.CharField(max_length=16)  # filesystem | volume
    name = models.CharField(max_length=63)
    from_pool = models.CharField(max_length=63)
    to_pool = models.CharField(max_length=63)
    state = models.CharField(max_length=16, default="pending")  # pending|running|done|failed
    error = models.TextField(blank=True, default="")
    bytes_moved = models.BigIntegerField(default=0)
    rounds = models.PositiveIntegerField(default=0)
    tree_sha256 = models.CharField(max_length=64, blank=True, default="")
    # names the move's snapshots (source pool) and staging copy (target pool) while they
    # may exist; "" once the run removed them. A run killed mid-way leaves it set, and the
    # next start of a worker (or the next move of the object) removes what it names.
    tag = models.CharField(max_length=16, blank=True, default="")
    job = models.ForeignKey("console.Job", null=True, blank=True, on_delete=models.SET_NULL,
                            related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"{self.kind} {self.name}: {self.from_pool} -> {self.to_pool}"
