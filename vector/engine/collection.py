"""A vector collection on a directory: durable upserts and deletes, search, builds, snapshots.

Directory layout::

    collection.json   the spec (name, dimension, metric, index_type, params)
    checkpoint.bin    the last checkpoint (rows + serialized faiss index), see checkpoint.py
    wal/NNN.log       write-ahead log segments after that checkpoint, see wal.py
    LOCK              flock held by the process that has the collection open

Writes go to the WAL (fsync, group commit) before they are acknowledged; a background
thread checkpoints and then truncates the WAL; :meth:`Collection.open` replays the WAL over
the last checkpoint. Concurrency: searches share a readers-writer lock, writes take it alone.
"""

import fcntl
import json
import os
import threading
import time

import faiss
import numpy as np

from plumbing.atomic import write_json_atomic

from . import records
from .memory import MemoryBudget, budget_check
from .build import build_index
from .checkpoint import FILENAME as CHECKPOINT_FILE
from .checkpoint import read_checkpoint, write_checkpoint
from .errors import (BuildInProgress, CollectionClosed, CollectionExists, CollectionLocked,
                     CollectionNotFound, InvalidInput, VectorNotFound)
from .filters import compile_filter, evaluate
from .rwlock import RWLock
from .search import run_search
from .snapshot import copy_snapshot, snapshot_collection
from .spec import CollectionSpec, estimate_memory, index_memory, new_index
from .store import VectorStore
from .validate import (check_ids, check_items, check_k, check_matrix, check_metadata,
                       check_search_params)
from .wal import WriteAheadLog, list_segments, read_segment, segment_path

SPEC_FILE = "collection.json"
WAL_DIR = "wal"


class Collection:
    """One vector collection. Create with :meth:`create`, reopen with :meth:`open`.

    ``memory_budget`` is an int (bytes) or a :class:`MemoryBudget` shared by collections;
    ``checkpoint_interval`` (seconds) and ``checkpoint_wal_bytes`` control the background
    checkpointer (``checkpoint_interval=None`` turns it off; :meth:`checkpoint` still works).
    """

    brute_force_limit = 20_000   # filtered searches over fewer rows than this are exact

    def __init__(self, path, spec, *, memory_budget=None, checkpoint_interval=30.0,
                 checkpoint_wal_bytes=64 << 20, _lockfd=None):
        self.path = os.path.abspath(path)
        self.spec = spec
        self.budget = memory_budget
        self.checkpoint_interval = checkpoint_interval
        self.checkpoint_wal_bytes = checkpoint_wal_bytes
        self._lockfd = _lockfd
        self._lock = RWLock()
        self._ck_mutex = threading.Lock()
        self._build_mutex = threading.Lock()
        self._store = VectorStore(spec.dimension)
        self._index = None
        self._kind = None             # "flat", "ivf" or "hnsw": what is serving now
        self._built_params = dict(spec.params)
        self._dead_in_graph = set()   # HNSW only: deleted slots the graph still holds
        self._dirty = None            # slots changed while a build runs (None: no build)
        self._changes = 0
        self._ck_changes = 0
        self._ck_time = time.monotonic()
        self.last_checkpoint_error = None
        self._wal = None
        self._closed = False
        self._stop = threading.Event()
        self._thread = None
        self._alive_bitmap = None
        if isinstance(memory_budget, MemoryBudget):
            memory_budget.register(self)

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, path, name, dimension, metric="l2", index_type="flat", params=None,
               expected_count=0, **kwargs):
        """Create a collection in directory ``path`` (created; must be empty) and open it.

        ``expected_count`` lets the memory budget refuse a collection that would not fit
        before any data is written.
        """
        spec = CollectionSpec.make(name, dimension, metric, index_type, params)
        budget = kwargs.get("memory_budget")
        if budget is not None:
            need = estimate_memory(dimension, expected_count, index_type, params, metric)
            budget_check(budget, None, need, f"collection {name!r} with {expected_count}"
                          " vectors")
        if os.path.exists(os.path.join(path, SPEC_FILE)):
            raise CollectionExists(f"a collection already exists in {path}")
        os.makedirs(os.path.join(path, WAL_DIR), exist_ok=True)
        write_json_atomic(os.path.join(path, SPEC_FILE), spec.to_json(), indent=1)
        return cls.open(path, **kwargs)

    @classmethod
    def open(cls, path, **kwargs):
        """Open the collection in ``path``: load the checkpoint, replay the WAL, start writing."""
        spec_path = os.path.join(path, SPEC_FILE)
        if not os.path.exists(spec_path):
            raise CollectionNotFound(f"no vector collection in {path}")
        lockfd = os.open(os.path.join(path, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lockfd)
            raise CollectionLocked(f"collection in {path} is open in another process") from None
        try:
            with open(spec_path) as f:
                spec = CollectionSpec.from_json(json.load(f))
            self = cls(path, spec, _lockfd=lockfd, **kwargs)
            self._load()
        except BaseException:
            os.close(lockfd)
            raise
        if self.checkpoint_interval:
            self._thread = threading.Thread(target=self._checkpoint_loop, daemon=True,
                                            name=f"vector-checkpoint-{spec.name}")
            self._thread.start()
        return self

    def _load(self):
        wal_dir = os.path.join(self.path, WAL_DIR)
        os.makedirs(wal_dir, exist_ok=True)
        ck = read_checkpoint(self.path)
        start = 1
        if ck is None:
            self._index, self._kind = _new_serving_index(self.spec)
        else:
            header, entries, vectors, index = ck
            start = header["wal_segment"]
            self._index, self._kind = index, header["kind"]
            self._built_params = header["params"]
            st = self._store
            st._grow(header["n_slots"])
            st.n_slots = header["n_slots"]
            if entries:
                slots = [e[0] for e in entries]
                lens = [len(json.dumps(e[2], separators=(",", ":"))) if e[2] else 0
                        for e in entries]
                st.put(slots, [e[1] for e in entries], vectors, [e[2] for e in entries], lens)
            self._dead_in_graph = set(header["dead_in_graph"])
            st.free = [s for s in range(st.n_slots - 1, -1, -1)
                       if not st.alive[s] and s not in self._dead_in_graph]
        segs = [s for s in list_segments(wal_dir) if s >= start]
        replayed = 0
        for i, seg in enumerate(segs):
            for payload in read_segment(segment_path(wal_dir, seg), is_last=i == len(segs) - 1):
                op, ids, vecs, metas = records.decode(payload, self.spec.dimension)
                if op == "upsert":
                    lens = [len(json.dumps(m, separators=(",", ":"))) if m else 0 for m in metas]
                    self._apply_upsert(ids, vecs, metas, lens)
                else:
                    self._apply_delete(ids)
                replayed += 1
        self._ck_changes = -1 if replayed else self._changes   # replayed WAL: checkpoint soon
        self._wal = WriteAheadLog(wal_dir, (segs[-1] + 1) if segs else start)

    def close(self, checkpoint=True):
        """Stop the checkpointer, optionally checkpoint, close the WAL and release the lock."""
        if self._closed:
            return
        self._stop.set()
        if self._thread:
            self._thread.join()
        if checkpoint:
            self.checkpoint()
        with self._lock.write():
            self._closed = True
            self._wal.close()
        if isinstance(self.budget, MemoryBudget):
            self.budget.unregister(self)
        os.close(self._lockfd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self):
        if self._closed:
            raise CollectionClosed(f"collection {self.spec.name!r} is closed")

    # ---------------------------------------------------------------- writes
    def upsert(self, items):
        """Insert or replace vectors given as [{id, values, metadata}]; returns the count.

        Returns only once the batch is in the write-ahead log on disk.
        """
        ids, mat, metas, lens = check_items(items, self.spec.dimension, self._normalize)
        return self._upsert(ids, mat, metas, lens)

    def upsert_arrays(self, ids, vectors, metadata=None):
        """Like :meth:`upsert` for a list of ids, an (n, d) array and optional metadata list."""
        ids = check_ids(ids)
        mat = check_matrix(vectors, self.spec.dimension, self._normalize)
        if len(ids) != len(mat):
            raise InvalidInput(f"{len(ids)} ids for {len(mat)} vectors")
        metadata = metadata if metadata is not None else [None] * len(ids)
        if len(metadata) != len(ids):
            raise InvalidInput(f"{len(metadata)} metadata objects for {len(ids)} ids")
        checked = [check_metadata(m) for m in metadata]
        return self._upsert(ids, mat, [c[0] for c in checked], [c[1] for c in checked])

    def _upsert(self, ids, mat, metas, lens):
        if not ids:
            return 0
        with self._lock.write():
            self._check_open()
            if self.budget is not None:
                new = sum(1 for v in ids if v not in self._store.id_to_slot)
                grow = (self._estimate(len(self._store) + new) - self._estimate(len(self._store))
                        + sum(lens) * 4)
                budget_check(self.budget, self, self.memory_bytes() + grow,
                              f"adding {new} vectors to collection {self.spec.name!r}")
            seq = self._wal.append(records.encode_upsert(ids, mat, metas))
            self._apply_upsert(ids, mat, metas, lens)
        self._wal.sync(seq)
        return len(ids)

    def delete(self, ids):
        """Delete vectors by id (unknown ids are ignored); returns how many were deleted.

        Returns only once the delete is in the write-ahead log on disk.
        """
        if isinstance(ids, (str, int)):
            raise InvalidInput("delete() takes a list of ids")
        ids = check_ids(list(ids), unique=False)
        with self._lock.write():
            self._check_open()
            present = list(dict.fromkeys(v for v in ids if v in self._store.id_to_slot))
            if not present:
                return 0
            seq = self._wal.append(records.encode_delete(present))
            self._apply_delete(present)
        self._wal.sync(seq)
        return len(present)

    @property
    def _normalize(self):
        return self.spec.metric == "cosine"

    @property
    def _removable(self):
        return self._kind != "hnsw"

    def _apply_upsert(self, ids, mat, metas, lens):
        st = self._store
        old = [st.id_to_slot.get(v) for v in ids]
        existing = [s for s in old if s is not None]
        if self._removable:
            if existing:
                _remove(self._index, existing)
            fresh = iter(st.allocate(len(ids) - len(existing)))
            slots = [s if s is not None else next(fresh) for s in old]
        else:
            for s in existing:
                st.clear(s, reusable=False)
                self._dead_in_graph.add(s)
            slots = st.allocate(len(ids))
        st.put(slots, ids, mat, metas, lens)
        self._index.add_with_ids(mat, np.asarray(slots, np.int64))
        if self._dirty is not None:
            self._dirty.update(slots)
            self._dirty.update(existing)
        self._changes += 1
        self._alive_bitmap = None

    def _apply_delete(self, ids):
        st = self._store
        slots = [st.id_to_slot[v] for v in ids if v in st.id_to_slot]
        if not slots:
            return
        if self._removable:
            _remove(self._index, slots)
        else:
            self._dead_in_graph.update(slots)
        for s in slots:
            st.clear(s, reusable=self._removable)
        if self._dirty is not None:
            self._dirty.update(slots)
        self._changes += 1
        self._alive_bitmap = None

    # ---------------------------------------------------------------- reads
    def get(self, vid):
        """Return {id, values, metadata} for ``vid``; raises VectorNotFound."""
        with self._lock.read():
            slot = self._store.id_to_slot.get(vid)
            if slot is None:
                raise VectorNotFound(f"no vector with id {vid!r} in collection {self.spec.name!r}")
            st = self._store
            return {"id": st.ids[slot], "values": st.vectors[slot].tolist(),
                    "metadata": st.meta[slot]}

    def __len__(self):
        return len(self._store)

    def search(self, vector, k=10, filter=None, nprobe=None, ef_search=None,
               include_metadata=True):
        """Top-k for one query vector: [{id, score, metadata}], best first.

        ``score`` is the squared L2 distance for l2 (smaller is closer), the inner product
        for ip and the cosine similarity for cosine (larger is closer). ``nprobe`` applies to
        IVF indexes, ``ef_search`` to HNSW. Returned metadata objects are shared: do not
        mutate them.
        """
        q = check_matrix(vector, self.spec.dimension, self._normalize, "query vector")
        if len(q) != 1:
            raise InvalidInput("search() takes one vector; use search_batch() for several")
        return self._search(q, k, filter, nprobe, ef_search, include_metadata)[0]

    def search_batch(self, vectors, k=10, filter=None, nprobe=None, ef_search=None,
                     include_metadata=True):
        """Top-k for each query vector (one filter for all); returns a list of result lists."""
        q = check_matrix(vectors, self.spec.dimension, self._normalize, "query vector")
        return self._search(q, k, filter, nprobe, ef_search, include_metadata)

    def _search(self, q, k, filter, nprobe, ef_search, include_metadata):
        k = check_k(k)
        check_search_params(self.spec.index_type, nprobe, ef_search)
        with self._lock.read():
            self._check_open()
            clauses = compile_filter(filter, self._store.field_values)
            allowed = evaluate(clauses, self._store.field_values) if clauses else None
            return run_search(self, q, k, allowed, nprobe, ef_search, include_metadata)

    # ---------------------------------------------------------------- builds
    def build_index(self, progress=None, cancel=None):
        """Train (IVF/PQ) or rebuild the index from the live rows, then swap it in.

        ``progress(pct, message)`` is called as work advances and ``cancel()`` is polled
        between steps (return True to abandon: :class:`BuildCancelled` is raised). Searches
        and writes continue on the old index meanwhile; writes made during the build are
        applied to the new index before the swap. Returns the resolved build parameters.
        """
        if not self._build_mutex.acquire(blocking=False):
            raise BuildInProgress(f"an index build is already running on {self.spec.name!r}")
        try:
            with self._lock.write():
                self._check_open()
                labels = self._store.live_slots()
                vectors = self._store.vectors[labels]
                self._dirty = set()
            try:
                index, kind, params = build_index(self.spec, vectors, labels, progress, cancel)
            except BaseException:
                with self._lock.write():
                    self._dirty = None
                raise
            del vectors
            with self._lock.write():
                self._swap(index, kind, params, set(labels.tolist()))
            if progress:
                progress(100, f"{self.spec.index_type} index built over {len(labels)} vectors")
            self.request_checkpoint()
            return params
        finally:
            self._build_mutex.release()

    def _swap(self, index, kind, params, in_new):
        """Bring the new index up to date with writes made during the build, then serve it."""
        st = self._store
        dirty, self._dirty = self._dirty, None
        stale = [s for s in dirty if s in in_new]   # the new index holds an old row here
        dead_in_graph, readd = set(), []
        if kind == "hnsw":
            # A graph node cannot be removed: mark it dead, and move a live row (not expected:
            # HNSW collections never overwrite a slot in place) to a fresh slot.
            for s in stale:
                dead_in_graph.add(s)
                if st.alive[s]:
                    fresh = st.allocate(1)[0]
                    row = (st.ids[s], st.vectors[s].copy(), st.meta[s], st._meta_len.get(s, 0))
                    st.clear(s, reusable=False)
                    st.put([fresh], [row[0]], row[1][None], [row[2]], [row[3]])
                    readd.append(fresh)
        else:
            if stale:
                _remove(index, stale)
            readd = [s for s in stale if st.alive[s]]
        add = sorted(readd + [s for s in dirty if s not in in_new and st.alive[s]])
        if add:
            idx = np.asarray(add, np.int64)
            index.add_with_ids(st.vectors[idx], idx)
        self._index, self._kind, self._built_params = index, kind, params
        self._dead_in_graph = dead_in_graph
        # Slots no graph references any more can be reused.
        st.free = [s for s in range(st.n_slots - 1, -1, -1)
                   if not st.alive[s] and s not in dead_in_graph]
        self._changes += 1
        self._alive_bitmap = None

    # ---------------------------------------------------------------- checkpoints
    def request_checkpoint(self):
        """Ask the background checkpointer to run soon."""
        self._ck_time = 0.0

    def checkpoint(self):
        """Write a checkpoint now (if anything changed) and truncate the WAL; True if written."""
        with self._ck_mutex:
            with self._lock.read():
                if self._closed or self._changes == self._ck_changes:
                    return False
                segment = self._wal.rotate()
                st = self._store
                live = st.live_slots()
                entries = [[s, v, m] for s, v, m in
                           zip(live.tolist(), st.ids[live].tolist(), st.meta[live].tolist())]
                vectors = st.vectors[live]
                index_bytes = faiss.serialize_index(self._index)
                header = {"version": 1, "wal_segment": segment, "kind": self._kind,
                          "params": self._built_params, "n_slots": st.n_slots,
                          "dead_in_graph": sorted(self._dead_in_graph),
                          "spec": self.spec.to_json(), "count": len(entries)}
                changes = self._changes
            write_checkpoint(self.path, header, entries, vectors, index_bytes)
            self._wal.delete_before(segment)
            self._ck_changes = changes
            self._ck_time = time.monotonic()
            return True

    def _checkpoint_loop(self):
        while not self._stop.wait(min(1.0, self.checkpoint_interval)):
            due = time.monotonic() - self._ck_time >= self.checkpoint_interval
            big = self._wal.bytes_since_rotate >= self.checkpoint_wal_bytes
            if (due or big) and self._changes != self._ck_changes:
                try:
                    self.checkpoint()
                    self.last_checkpoint_error = None
                except Exception as exc:  # keep serving; the WAL still holds every write
                    self.last_checkpoint_error = f"{type(exc).__name__}: {exc}"
                    self._ck_time = time.monotonic()

    # ---------------------------------------------------------------- snapshots
    def snapshot(self, dest):
        """Write a consistent copy (checkpoint + sealed WAL) into new directory ``dest``.

        Open it with :meth:`restore` (copies it) or :meth:`open` (uses it in place).
        """
        return snapshot_collection(self, dest)

    @classmethod
    def restore(cls, snapshot_dir, path, name=None, **kwargs):
        """Copy snapshot ``snapshot_dir`` into new directory ``path`` and open it there."""
        copy_snapshot(snapshot_dir, path, name)
        return cls.open(path, **kwargs)

    # ---------------------------------------------------------------- reports
    def _estimate(self, count):
        p = {k: v for k, v in self._built_params.items() if k in self.spec.params}
        return estimate_memory(self.spec.dimension, count, self.spec.index_type, p,
                               self.spec.metric)

    def memory_bytes(self):
        """Approximate resident bytes of this collection: rows, metadata and faiss index."""
        return self._store.nbytes() + index_memory(self._index, self._kind, self._built_params)

    @property
    def index_state(self):
        """"ready", or "untrained" for an IVF collection still serving exact search."""
        if self.spec.needs_training and self._kind != "ivf":
            return "untrained"
        return "ready"

    @property
    def faiss_index(self):
        """The faiss index now serving (for benchmarks; do not modify it)."""
        return self._index

    def stats(self):
        """A JSON-able report: spec, count, index state, memory, WAL and checkpoint state."""
        ck = os.path.join(self.path, CHECKPOINT_FILE)
        return dict(self.spec.to_json(), count=len(self._store), index_state=self.index_state,
                    built_params=self._built_params, memory_bytes=self.memory_bytes(),
                    dead_in_index=len(self._dead_in_graph),
                    wal_bytes=self._wal.bytes_since_rotate, wal_fsyncs=self._wal.fsyncs,
                    wal_records=self._wal.written,
                    checkpoint_bytes=os.path.getsize(ck) if os.path.exists(ck) else 0,
                    last_checkpoint_error=self.last_checkpoint_error,
                    building=self._dirty is not None)


def _new_serving_index(spec):
    return new_index(spec), ("hnsw" if spec.index_type == "hnsw" else "flat")


def _remove(index, slots):
    arr = np.ascontiguousarray(slots, np.int64)
    index.remove_ids(faiss.IDSelectorArray(len(arr), faiss.swig_ptr(arr)))
