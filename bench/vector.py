"""Vector search benchmark: Strata's engine against faiss called directly, and hnswlib.

One run: QPS and recall@10 on N x D clustered vectors (default 200,000 x 128)
for Flat, IVF-Flat and HNSW. Every index is built once through the engine
(``vector.engine.Collection``); the same faiss index object is then searched

- through the engine API (``Collection.search_batch`` / ``Collection.search``): validation,
  locking, id and metadata mapping included, and
- through faiss directly (``index.search``): the limit for this index,

and for HNSW, hnswlib (same M, efConstruction, efSearch) is the peer. Times are medians of
``--runs`` repetitions; ratios are against direct faiss on the same index, so at the same
recall.

Adding a client (REST, SDK): write a class with ``name``, ``search_batch(queries, k, knobs)``
and ``search_one(query, k, knobs)`` returning ids (anything ``id_of`` maps to row numbers),
and append it in :func:`clients_for` — e.g. a ``RestClient`` posting to
``/api/v1/vector-collections/{name}/search/``. The table grows a row per client.

Usage: ``.venv/bin/python bench/vector.py [--n 200000] [--dim 128] [--queries 1000]``
``[--strata-url http://127.0.0.1:8000 --strata-token T | --strata-data-dir var]`` adds the
"strata REST" row: the same index imported into a running appliance, searched through the
SDK (see bench/vector_rest.py).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import faiss
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from vector.engine import Collection  # noqa: E402

K = 10


def clustered(n, dim, clusters, seed, noise=1.2):
    """Gaussian clusters around random centres (fixed seed): the shape of real embeddings.

    ``noise`` 1.2 makes clusters overlap enough that IVF/HNSW knobs trade recall for speed.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    labels = rng.integers(0, clusters, n)
    return centres[labels] + rng.standard_normal((n, dim)).astype(np.float32) * noise


def recall(found, truth):
    """Mean recall@k of row-number arrays ``found`` against ``truth`` (both (nq, k))."""
    hits = sum(len(set(f.tolist()) & set(t.tolist())) for f, t in zip(found, truth))
    return hits / truth.size


def interleaved(clients, queries, singles, knobs, runs):
    """{client name: (median batch s, median one-by-one s, last batch ids)}.

    Clients take turns within each repetition (in a rotating order), so load from other
    processes on the machine hits them alike; medians drop the outliers.
    """
    batch = {c.name: [] for c in clients}
    one = {c.name: [] for c in clients}
    found = {}
    for rep in range(runs):
        order = clients[rep % len(clients):] + clients[:rep % len(clients)]  # no one always first
        for c in order:
            t0 = time.perf_counter()
            found[c.name] = c.search_batch(queries, K, knobs)
            batch[c.name].append(time.perf_counter() - t0)
        for c in order:
            t0 = time.perf_counter()
            for q in singles:
                c.search_one(q, K, knobs)
            one[c.name].append(time.perf_counter() - t0)
    return {name: (statistics.median(batch[name]), statistics.median(one[name]), found[name])
            for name in batch}


# ---------------------------------------------------------------- clients (table rows)
class EngineClient:
    """Strata's engine API in-process: what the REST layer calls."""

    name = "strata engine"

    def __init__(self, coll):
        self.coll = coll

    def search_batch(self, queries, k, knobs):
        res = self.coll.search_batch(queries, k, **knobs)
        return np.array([[r["id"] for r in row] + [-1] * (k - len(row)) for row in res])

    def search_one(self, query, k, knobs):
        return [r["id"] for r in self.coll.search(query, k, **knobs)]


class FaissClient:
    """faiss called directly on the engine's own index object: the limit."""

    name = "faiss direct"

    def __init__(self, index, kind):
        self.index, self.kind = index, kind

    def _params(self, knobs):
        if "nprobe" in knobs:
            return faiss.SearchParametersIVF(nprobe=knobs["nprobe"])
        if "ef_search" in knobs:
            return faiss.SearchParametersHNSW(efSearch=knobs["ef_search"])
        return None

    def search_batch(self, queries, k, knobs):
        return self.index.search(queries, k, params=self._params(knobs))[1]

    def search_one(self, query, k, knobs):
        return self.index.search(query[None], k, params=self._params(knobs))[1][0]


class HnswlibClient:
    """hnswlib (PyPI) with the same graph parameters: the HNSW peer."""

    name = "hnswlib"
    threads = -1

    def __init__(self, data, m, ef_construction):
        import hnswlib
        self.index = hnswlib.Index(space="l2", dim=data.shape[1])
        self.index.init_index(max_elements=len(data), M=m, ef_construction=ef_construction,
                              random_seed=1)
        t0 = time.perf_counter()
        self.index.add_items(data, np.arange(len(data)), num_threads=-1)
        self.build_s = time.perf_counter() - t0

    def search_batch(self, queries, k, knobs):
        self.index.set_ef(knobs["ef_search"])
        return self.index.knn_query(queries, k, num_threads=self.threads)[0]

    def search_one(self, query, k, knobs):
        self.index.set_ef(knobs["ef_search"])
        return self.index.knn_query(query[None], k, num_threads=1)[0][0]


STRATA = {}   # {"url", "token"} of a running appliance: adds the "strata REST" row


def clients_for(coll, index_type, data, params):
    """The rows of the table for one index. Add REST/SDK clients here."""
    out = [EngineClient(coll), FaissClient(coll.faiss_index, index_type)]
    if STRATA:
        from bench.vector_rest import RestClient
        out.append(RestClient(STRATA["url"], STRATA["token"], coll, index_type))
    if index_type == "hnsw":
        out.append(HnswlibClient(data, params["M"], params["efConstruction"]))
    return out


# ---------------------------------------------------------------- the run
INDEXES = {
    "flat": ({}, [{}]),
    "ivf_flat": ({"nlist": 1024}, [{"nprobe": 8}, {"nprobe": 32}]),
    "hnsw": ({"M": 32, "efConstruction": 100}, [{"ef_search": 32}, {"ef_search": 128}]),
}


def build(root, index_type, params, data):
    """Create a collection and load ``data`` through the engine; returns (coll, seconds)."""
    coll = Collection.create(os.path.join(root, index_type), index_type.replace("_", "-"),
                             data.shape[1], "l2", index_type, params, checkpoint_interval=None)
    t0 = time.perf_counter()
    for lo in range(0, len(data), 20_000):
        coll.upsert_arrays(list(range(lo, min(len(data), lo + 20_000))), data[lo:lo + 20_000])
    if coll.index_state == "untrained":
        coll.build_index()
    return coll, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--single", type=int, default=200, help="queries for the one-at-a-time QPS")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--types", default="flat,ivf_flat,hnsw")
    ap.add_argument("--threads", type=int, default=0,
                    help="OpenMP/hnswlib threads for batch search (default: all CPUs)")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--strata-url", help="a running Strata (same machine): adds a REST row")
    ap.add_argument("--strata-token", help="its admin API token")
    ap.add_argument("--strata-data-dir", help="or its data dir (reads credentials.json)")
    args = ap.parse_args()
    if args.strata_url or args.strata_data_dir:
        from bench.vector_rest import strata_endpoint
        url, token = strata_endpoint(args.strata_url, args.strata_token, args.strata_data_dir)
        STRATA.update(url=url, token=token)
    if args.threads:
        faiss.omp_set_num_threads(args.threads)
        HnswlibClient.threads = args.threads

    allx = clustered(args.n + args.queries, args.dim, clusters=1000, seed=42)
    data, queries = allx[:args.n], allx[args.n:]
    exact = faiss.IndexFlatL2(args.dim)
    exact.add(data)
    truth = exact.search(queries, K)[1]
    del exact
    print(f"# {args.n} x {args.dim} clustered vectors, {args.queries} queries, k={K}, "
          f"median of {args.runs} runs, faiss {faiss.__version__}, "
          f"{faiss.omp_get_max_threads()} OpenMP threads, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at start")
    header = (f"{'index':9} {'knobs':14} {'client':14} {'build s':>8} {'batch QPS':>10} "
              f"{'x faiss':>7} {'1-by-1 QPS':>10} {'x faiss':>7} {'recall@10':>9}")
    print(header)
    print("-" * len(header))
    rows = []
    root = tempfile.mkdtemp(prefix="strata-bench-")
    try:
        for index_type in args.types.split(","):
            params, knob_sets = INDEXES[index_type]
            coll, build_s = build(root, index_type, params, data)
            clients = clients_for(coll, index_type, data, coll.spec.params)
            for knobs in knob_sets:
                measured = interleaved(clients, queries, queries[:args.single], knobs, args.runs)
                ref = measured["faiss direct"]
                knob = ",".join(f"{k}={v}" for k, v in knobs.items()) or "-"
                for client in clients:
                    t_batch, t_one, found = measured[client.name]
                    row = {"index": index_type, "knobs": knobs, "client": client.name,
                           "build_s": getattr(client, "build_s", build_s),
                           "batch_qps": len(queries) / t_batch,
                           "single_qps": args.single / t_one,
                           "batch_x_faiss": ref[0] / t_batch, "single_x_faiss": ref[1] / t_one,
                           "recall": recall(np.asarray(found), truth),
                           "memory_bytes": coll.memory_bytes()}
                    rows.append(row)
                    print(f"{index_type:9} {knob:14} {row['client']:14} {row['build_s']:8.1f} "
                          f"{row['batch_qps']:10.0f} {row['batch_x_faiss']:7.2f} "
                          f"{row['single_qps']:10.0f} {row['single_x_faiss']:7.2f} "
                          f"{row['recall']:9.3f}", flush=True)
            print(f"# {index_type}: engine memory report {coll.memory_bytes() / 2**20:.0f} MiB")
            for client in clients:
                getattr(client, "close", lambda: None)()
            coll.close(checkpoint=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
