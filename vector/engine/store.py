"""In-memory rows of a collection: vectors, ids, metadata and a per-field value index.

Rows live in *slots* (faiss labels are slot numbers). The store only holds data; the
collection decides when a slot may be reused (never while an HNSW graph still points at it).
"""

import numpy as np

_GROWTH = 1.5


class VectorStore:
    """Slot arrays for one collection. Not thread-safe: the collection's lock guards it."""

    def __init__(self, dimension, capacity=1024):
        self.dimension = dimension
        self.capacity = 0
        self.n_slots = 0                      # high-water mark of used slots
        self.vectors = np.zeros((0, dimension), np.float32)
        self.alive = np.zeros(0, bool)
        self.ids = np.empty(0, object)
        self.meta = np.empty(0, object)
        self.id_to_slot = {}
        self.free = []                        # slots that may be reused
        self.field_values = {}                # field -> {slot: value}
        self.meta_bytes = 0                   # JSON size of live metadata (for memory reports)
        self._meta_len = {}
        self._grow(capacity)

    def __len__(self):
        return len(self.id_to_slot)

    def _grow(self, need):
        if need <= self.capacity:
            return
        cap = max(need, int(self.capacity * _GROWTH) + 16)
        vec = np.zeros((cap, self.dimension), np.float32)
        vec[:self.n_slots] = self.vectors[:self.n_slots]
        alive = np.zeros(cap, bool)
        alive[:self.n_slots] = self.alive[:self.n_slots]
        ids = np.empty(cap, object)
        ids[:self.n_slots] = self.ids[:self.n_slots]
        meta = np.empty(cap, object)
        meta[:self.n_slots] = self.meta[:self.n_slots]
        self.vectors, self.alive, self.ids, self.meta, self.capacity = vec, alive, ids, meta, cap

    def allocate(self, count):
        """Return ``count`` slot numbers, reusing free slots first."""
        out = []
        while self.free and len(out) < count:
            out.append(self.free.pop())
        rest = count - len(out)
        if rest:
            self._grow(self.n_slots + rest)
            out.extend(range(self.n_slots, self.n_slots + rest))
            self.n_slots += rest
        return out

    def put(self, slots, ids, vectors, metas, meta_lens):
        """Store rows into ``slots`` (already allocated, or the id's current slot)."""
        idx = np.asarray(slots, np.int64)
        self.vectors[idx] = vectors
        self.alive[idx] = True
        for slot, vid, meta, mlen in zip(slots, ids, metas, meta_lens):
            self._drop_fields(slot)
            self.ids[slot] = vid
            self.meta[slot] = meta
            self.id_to_slot[vid] = slot
            if meta:
                for field, value in meta.items():
                    self.field_values.setdefault(field, {})[slot] = value
            self._meta_len[slot] = mlen
            self.meta_bytes += mlen

    def _drop_fields(self, slot):
        old = self.meta[slot]
        if old:
            for field in old:
                values = self.field_values.get(field)
                if values is not None:
                    values.pop(slot, None)
                    if not values:
                        del self.field_values[field]
        self.meta_bytes -= self._meta_len.pop(slot, 0)

    def clear(self, slot, reusable):
        """Forget the row in ``slot``; put the slot on the free list if ``reusable``."""
        self._drop_fields(slot)
        vid = self.ids[slot]
        if self.id_to_slot.get(vid) == slot:
            del self.id_to_slot[vid]
        self.ids[slot] = None
        self.meta[slot] = None
        self.alive[slot] = False
        if reusable:
            self.free.append(slot)

    def live_slots(self):
        """Sorted array of live slot numbers."""
        return np.flatnonzero(self.alive[:self.n_slots]).astype(np.int64)

    def nbytes(self):
        """Approximate resident bytes of the store (arrays, id map, metadata)."""
        arrays = self.vectors.nbytes + self.alive.nbytes + self.ids.nbytes + self.meta.nbytes
        # dict entry + boxed id + per-slot bookkeeping; metadata as ~4x its JSON size.
        return int(arrays + len(self.id_to_slot) * 120 + self.meta_bytes * 4)
