"""A memory budget shared by collections: refuse growth that would not fit."""

import threading
import weakref

from .errors import MemoryBudgetExceeded


def _fmt(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


class MemoryBudget:
    """A byte limit for the collections registered with it (e.g. all collections of a node)."""

    def __init__(self, limit_bytes):
        self.limit = int(limit_bytes)
        self._members = weakref.WeakSet()
        self._mutex = threading.Lock()

    def register(self, collection):
        """Count ``collection`` against this budget."""
        with self._mutex:
            self._members.add(collection)

    def unregister(self, collection):
        """Stop counting ``collection`` (closed or dropped)."""
        with self._mutex:
            self._members.discard(collection)

    def used(self, exclude=None):
        """Bytes used by registered collections, leaving out ``exclude``."""
        with self._mutex:
            members = list(self._members)
        return sum(c.memory_bytes() for c in members if c is not exclude)


def budget_check(budget, collection, projected, what):
    """Raise MemoryBudgetExceeded if ``collection`` growing to ``projected`` bytes won't fit.

    ``budget`` is a :class:`MemoryBudget` or a plain byte count for this collection alone.
    """
    if isinstance(budget, MemoryBudget):
        others = budget.used(exclude=collection)
        limit = budget.limit
    else:
        others, limit = 0, int(budget)
    if others + projected > limit:
        free = max(0, limit - others)
        raise MemoryBudgetExceeded(
            f"{what} needs about {_fmt(projected)} of memory but only {_fmt(free)} of the"
            f" {_fmt(limit)} vector memory budget is free; drop or shrink other collections,"
            " choose ivf_pq (smaller codes), or raise the budget")
