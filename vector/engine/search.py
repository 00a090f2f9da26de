"""Running a search on a collection's serving index (called under the collection's read lock).

Filtered searches over few rows (``Collection.brute_force_limit``) and every filtered search
on a flat index are exact scans of the matching rows; larger filtered searches pass a faiss
ID selector (a bitmap of allowed slots) to the approximate index. HNSW graphs that still hold
deleted rows always search with a bitmap of live slots.
"""

import faiss
import numpy as np


def _bitmap(mask):
    bits = np.packbits(mask, bitorder="little")
    return bits, faiss.IDSelectorBitmap(len(bits), faiss.swig_ptr(bits))


def _alive_selector(coll):
    cached = coll._alive_bitmap
    if cached is None:
        st = coll._store
        cached = coll._alive_bitmap = _bitmap(st.alive[:st.n_slots])
    return cached


SMALL_BATCH = 4


def run_search(coll, q, k, allowed, nprobe, ef_search, include_metadata):
    """Return one result list per query row of ``q`` (see Collection.search_batch).

    A batch of a few queries runs faiss with one OpenMP thread (a per-thread setting): faiss
    parallelizes over queries, so more threads only add wake-up latency, which is large on a
    busy machine.
    """
    if len(q) >= SMALL_BATCH:
        return _run_search(coll, q, k, allowed, nprobe, ef_search, include_metadata)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return _run_search(coll, q, k, allowed, nprobe, ef_search, include_metadata)
    finally:
        faiss.omp_set_num_threads(threads)


def _run_search(coll, q, k, allowed, nprobe, ef_search, include_metadata):
    st, kind, index = coll._store, coll._kind, coll._index
    nq = len(q)
    keep = None
    sel = None
    if allowed is not None:
        if not allowed:
            return [[] for _ in range(nq)]
        if kind == "flat" or len(allowed) <= coll.brute_force_limit:
            slots = np.fromiter(allowed, np.int64, len(allowed))
            slots.sort()
            D, I = faiss.knn(q, st.vectors[slots], min(k, len(slots)),
                             metric=coll.spec.faiss_metric)
            labels = np.where(I >= 0, slots[np.maximum(I, 0)], -1)
            return format_results(st, D, labels, include_metadata, coll.spec.metric == "cosine")
        mask = np.zeros(st.n_slots, bool)
        mask[np.fromiter(allowed, np.int64, len(allowed))] = True
        keep, sel = _bitmap(mask)
    elif coll._dead_in_graph:
        keep, sel = _alive_selector(coll)
    params = None
    if kind == "ivf" and (sel is not None or nprobe):
        ivf = faiss.extract_index_ivf(index)
        params = faiss.SearchParametersIVF(nprobe=min(nprobe or ivf.nprobe, ivf.nlist))
    elif kind == "hnsw" and (sel is not None or ef_search):
        params = faiss.SearchParametersHNSW(efSearch=ef_search or coll._built_params["efSearch"])
    elif kind == "flat" and sel is not None:
        params = faiss.SearchParameters()
    if params is not None and sel is not None:
        params.sel = sel
    D, I = index.search(q, k, params=params)
    del keep  # the bitmap had to outlive the search
    return format_results(st, D, I, include_metadata, coll.spec.metric == "cosine")


def format_results(st, D, I, include_metadata, cosine=False):
    """Turn faiss (distances, labels) into [[{id, score, metadata}]]; -1 labels are dropped.

    With ``cosine``, D holds squared L2 distances between unit vectors: cos = 1 - d/2.
    """
    if cosine:
        D = 1.0 - D / 2.0
    ok = I >= 0
    safe = np.where(ok, I, 0)
    ids = st.ids[safe].tolist()
    scores = D.tolist()
    metas = st.meta[safe].tolist() if include_metadata else None
    if len(ids) == 1 and ok.all():   # the common single-query case, without the loops below
        if include_metadata:
            return [[{"id": a, "score": b, "metadata": c}
                     for a, b, c in zip(ids[0], scores[0], metas[0])]]
        return [[{"id": a, "score": b} for a, b in zip(ids[0], scores[0])]]
    out = []
    full = bool(ok.all())
    if include_metadata:
        for r, (ir, sr, mr) in enumerate(zip(ids, scores, metas)):
            row = [{"id": a, "score": b, "metadata": c} for a, b, c in zip(ir, sr, mr)]
            if not full:
                row = [x for x, good in zip(row, ok[r]) if good]
            out.append(row)
    else:
        for r, (ir, sr) in enumerate(zip(ids, scores)):
            row = [{"id": a, "score": b} for a, b in zip(ir, sr)]
            if not full:
                row = [x for x, good in zip(row, ok[r]) if good]
            out.append(row)
    return out
