"""Building a collection's index from a snapshot of its rows: IVF training and full rebuilds.

Runs without the collection lock; reports ``progress(pct, message)`` and polls ``cancel()``
between steps so a long build can be abandoned. The collection swaps the result in.
"""

import faiss
import numpy as np

from .errors import BuildCancelled, InsufficientTrainingData
from .spec import new_flat_index, new_hnsw_index, new_ivf_index

CHUNK = 20_000
TRAIN_POINTS_PER_LIST = 64


def _noop(*_args):
    return None


def build_index(spec, vectors, labels, progress=None, cancel=None, seed=1234):
    """Return (index, kind, params) holding ``vectors`` under ``labels``.

    ``kind`` is "flat", "ivf" or "hnsw"; ``params`` are the resolved build parameters
    (for IVF: the chosen nlist and m). Raises :class:`BuildCancelled` or
    :class:`InsufficientTrainingData`.
    """
    progress = progress or _noop
    cancel = cancel or (lambda: False)
    n = len(labels)

    def check():
        if cancel():
            raise BuildCancelled("index build cancelled; the previous index is still serving")

    params = dict(spec.params)
    if spec.index_type == "flat":
        index, kind, start = new_flat_index(spec), "flat", 5
    elif spec.index_type == "hnsw":
        index, kind, start = new_hnsw_index(spec), "hnsw", 5
    else:
        kind = "ivf"
        index, params = new_ivf_index(spec, n)
        nlist = params["nlist"]
        need = nlist
        if spec.index_type == "ivf_pq":
            need = max(need, 1 << params["nbits"])
        if n < need:
            raise InsufficientTrainingData(
                f"{spec.index_type} with nlist={nlist}"
                + (f", nbits={params['nbits']}" if spec.index_type == "ivf_pq" else "")
                + f" needs at least {need} vectors to train; the collection has {n}."
                " Add vectors first, or lower nlist/nbits")
        sample_size = min(n, max(nlist * TRAIN_POINTS_PER_LIST, 1 << params.get("nbits", 0), 10_000))
        progress(2, f"sampling {sample_size} of {n} vectors for training")
        rng = np.random.default_rng(seed)
        sample = vectors[np.sort(rng.choice(n, sample_size, replace=False))] \
            if sample_size < n else vectors
        check()
        progress(5, f"training {spec.index_type} (nlist={nlist}) on {sample_size} vectors")
        index.cp.seed = seed
        index.train(np.ascontiguousarray(sample, np.float32))
        index.set_direct_map_type(faiss.DirectMap.Hashtable)
        check()
        start = 50
        progress(start, "training done; adding vectors")
    for lo in range(0, n, CHUNK):
        check()
        hi = min(n, lo + CHUNK)
        index.add_with_ids(np.ascontiguousarray(vectors[lo:hi], np.float32),
                           np.ascontiguousarray(labels[lo:hi], np.int64))
        progress(start + (99 - start) * hi // max(n, 1), f"added {hi} of {n} vectors")
    check()
    return index, kind, params
