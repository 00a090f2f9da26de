"""The classes of work and the share the operator gave each (plumbing.workclass)."""
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from plumbing.workclass import CLASSES, DEFAULT_SHARES, MAX_SHARE, MIN_SHARE


class WorkClass(models.Model):
    """One class of work: ``samples``, ``checkpoints`` or ``background``; the rows are made
    with their default shares on first use, and only their shares change."""

    name = models.CharField(max_length=16, primary_key=True,
                            choices=[(c, c) for c in CLASSES])
    share = models.PositiveIntegerField(
        validators=[MinValueValidator(MIN_SHARE), MaxValueValidator(MAX_SHARE)])
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} (share {self.share})"

    @classmethod
    def ensure(cls) -> None:
        """Every class has its row (the default share where it had none)."""
        for name in CLASSES:
            cls.objects.get_or_create(name=name, defaults={"share": DEFAULT_SHARES[name]})

    @classmethod
    def shares(cls) -> dict:
        """{class: share}, the defaults for a class without a row."""
        found = dict(cls.objects.values_list("name", "share"))
        return {name: found.get(name, DEFAULT_SHARES[name]) for name in CLASSES}
