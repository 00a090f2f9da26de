"""A directory of collections: create, open, list, drop, snapshot and restore by name."""

import os
import shutil
import threading

from .memory import MemoryBudget
from .collection import SPEC_FILE, Collection
from .errors import CollectionExists, CollectionNotFound
from .spec import validate_name


class CollectionManager:
    """Collections stored as ``<root>/<name>/``, opened at most once each.

    ``memory_budget`` (bytes, optional) is shared by every collection opened through this
    manager: creating or growing a collection that would not fit raises
    :class:`MemoryBudgetExceeded`. Other keyword arguments are passed to
    :meth:`Collection.open` (e.g. ``checkpoint_interval``).
    """

    def __init__(self, root, memory_budget=None, **collection_options):
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.budget = MemoryBudget(memory_budget) if memory_budget is not None else None
        self._options = collection_options
        self._open = {}
        self._mutex = threading.Lock()

    def _path(self, name):
        return os.path.join(self.root, validate_name(name))

    def create(self, name, dimension, metric="l2", index_type="flat", params=None,
               expected_count=0):
        """Create and open a collection; raises CollectionExists, MemoryBudgetExceeded, ..."""
        path = self._path(name)
        with self._mutex:
            if os.path.exists(os.path.join(path, SPEC_FILE)):
                raise CollectionExists(f"collection {name!r} already exists")
            coll = Collection.create(path, name, dimension, metric, index_type, params,
                                     expected_count=expected_count, memory_budget=self.budget,
                                     **self._options)
            self._open[name] = coll
            return coll

    def get(self, name):
        """Return the open collection ``name``, opening it (WAL replay) on first use."""
        path = self._path(name)
        with self._mutex:
            coll = self._open.get(name)
            if coll is None:
                if not os.path.exists(os.path.join(path, SPEC_FILE)):
                    raise CollectionNotFound(f"no collection named {name!r}")
                coll = Collection.open(path, memory_budget=self.budget, **self._options)
                self._open[name] = coll
            return coll

    open = get

    def list(self):
        """Sorted names of the collections stored under the root."""
        return sorted(n for n in os.listdir(self.root)
                      if os.path.exists(os.path.join(self.root, n, SPEC_FILE)))

    def exists(self, name):
        """True if a collection named ``name`` is stored."""
        return os.path.exists(os.path.join(self._path(name), SPEC_FILE))

    def drop(self, name):
        """Close and delete collection ``name`` and all its data."""
        path = self._path(name)
        with self._mutex:
            coll = self._open.pop(name, None)
            if coll is None and not os.path.exists(os.path.join(path, SPEC_FILE)):
                raise CollectionNotFound(f"no collection named {name!r}")
            if coll is not None:
                coll.close(checkpoint=False)
            trash = os.path.join(self.root, f".dropped-{name}-{os.getpid()}")
            os.replace(path, trash)   # one rename: a crash never leaves half a collection
            shutil.rmtree(trash)

    def snapshot(self, name, dest):
        """Write a consistent copy of collection ``name`` into directory ``dest``."""
        return self.get(name).snapshot(dest)

    def restore(self, snapshot_dir, name):
        """Create collection ``name`` from a snapshot directory and open it."""
        path = self._path(name)
        with self._mutex:
            if os.path.exists(path) and os.listdir(path):
                raise CollectionExists(f"collection {name!r} already exists")
            coll = Collection.restore(snapshot_dir, path, name=name, memory_budget=self.budget,
                                      **self._options)
            self._open[name] = coll
            return coll

    def memory_bytes(self):
        """Bytes used by the open collections."""
        with self._mutex:
            return sum(c.memory_bytes() for c in self._open.values())

    def close(self):
        """Checkpoint and close every open collection."""
        with self._mutex:
            for coll in self._open.values():
                coll.close()
            self._open.clear()
