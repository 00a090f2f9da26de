"""The collections this process has open: one engine `Collection` per directory, per process.

The engine takes an exclusive lock on a collection's directory, so exactly one process may
serve it: the web server (one uvicorn process). Every request in that process goes through
the module-level :data:`registry`; a second process that tries to open the same collection
gets `CollectionLocked` (409). No Django here: the service layer passes paths in.
"""
import atexit
import logging
import os
import threading

from vector.engine import Collection, MemoryBudget

log = logging.getLogger(__name__)


def default_memory_budget() -> int:
    """Half of this machine's physical memory, in bytes."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):
        return 4 << 30


class Registry:
    """Open collections keyed by their directory, sharing one memory budget."""

    def __init__(self, memory_budget: int | None = None, checkpoint_interval: float = 30.0):
        self._budget_bytes = memory_budget
        self._budget = None
        self.checkpoint_interval = checkpoint_interval
        self._open: dict[str, Collection] = {}
        self._mutex = threading.RLock()

    @property
    def budget(self) -> MemoryBudget:
        """The memory budget every open collection counts against (made on first use)."""
        with self._mutex:
            if self._budget is None:
                self._budget = MemoryBudget(self._budget_bytes or default_memory_budget())
            return self._budget

    def set_budget(self, limit_bytes: int) -> None:
        """Change the byte limit shared by the open collections."""
        self.budget.limit = int(limit_bytes)

    def _options(self) -> dict:
        return {"memory_budget": self.budget, "checkpoint_interval": self.checkpoint_interval}

    def create(self, path, name, dimension, metric, index_type, params, expected_count=0):
        """Create a collection in empty directory ``path`` and keep it open."""
        path = os.path.abspath(path)
        with self._mutex:
            coll = Collection.create(path, name, dimension, metric, index_type, params,
                                     expected_count=expected_count, **self._options())
            self._open[path] = coll
            return coll

    def restore(self, snapshot_dir, path, name):
        """Copy a collection snapshot into ``path`` as collection ``name`` and keep it open."""
        path = os.path.abspath(path)
        with self._mutex:
            coll = Collection.restore(snapshot_dir, path, name=name, **self._options())
            self._open[path] = coll
            return coll

    def get(self, path) -> Collection:
        """The open collection in ``path``, opened (checkpoint + WAL replay) on first use."""
        path = os.path.abspath(path)
        with self._mutex:
            coll = self._open.get(path)
            if coll is None:
                coll = Collection.open(path, **self._options())
                self._open[path] = coll
            return coll

    def peek(self, path) -> Collection | None:
        """The collection in ``path`` if this process has it open, else None."""
        return self._open.get(os.path.abspath(path))

    def close(self, path, checkpoint: bool = True) -> None:
        """Close the collection in ``path`` if it is open here (checkpointing it first)."""
        with self._mutex:
            coll = self._open.pop(os.path.abspath(path), None)
        if coll is not None:
            coll.close(checkpoint=checkpoint)

    def close_all(self) -> None:
        """Checkpoint and close every open collection (process shutdown, tests)."""
        with self._mutex:
            colls, self._open = list(self._open.values()), {}
        for coll in colls:
            try:
                coll.close()
            except Exception:  # closing the others matters more
                log.exception("closing vector collection %s failed", coll.path)

    def memory_bytes(self) -> int:
        """Bytes used by the collections open in this process."""
        return sum(c.memory_bytes() for c in list(self._open.values()))


registry = Registry()
# A clean shutdown of the web server checkpoints every open collection (a crash replays the WAL).
atexit.register(registry.close_all)
