"""Strata vector SDK: collections, upserts, searches and deletes over REST.

Importable without Django; needs `requests` and numpy (numpy arrays are accepted where
vectors are; batch searches and `upsert_arrays` send base64 float32 rows)::

    from vector.sdk import VectorClient
    client = VectorClient("http://strata:8000", token)
    client.create_collection("docs", dimension=768, metric="cosine", index_type="hnsw")
    client.upsert("docs", [{"id": "a1", "values": emb, "metadata": {"lang": "en"}}])
    hits = client.search("docs", emb, k=10, filter={"lang": "en"})   # [{id, score, metadata}]
    client.delete("docs", ["a1"])
    job = client.build("docs", wait=True)          # train/rebuild as a Job, waits for it
"""
import requests

from plumbing.restclient import ApiError, JobFailed, RestClient

__all__ = ["VectorClient", "VectorError"]


class VectorError(ApiError):
    """The plane refused a request, or could not be reached (`status` None): `status`, `code`
    (e.g. "dimension_mismatch"), `detail`, `body`."""


class _Rest(RestClient):
    error = VectorError


# Django refuses request bodies above DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB unless raised).
REQUEST_BYTES = 2_000_000


def _batch_for(dimension: int) -> int:
    """Vectors per request that keep a JSON body under REQUEST_BYTES (~20 bytes a float)."""
    return max(1, REQUEST_BYTES // (dimension * 20 + 200))


def _f32(vectors):
    import numpy as np

    mat = np.ascontiguousarray(vectors, dtype="<f4")
    return mat.reshape(1, -1) if mat.ndim == 1 else mat


def _b64(mat) -> str:
    import base64

    return base64.b64encode(mat.tobytes()).decode("ascii")


def _values(v):
    return v.tolist() if hasattr(v, "tolist") else list(v)


class VectorClient:
    """A client for /api/v1/vector-collections/ authenticated with an API token."""

    def __init__(self, url: str, token: str, timeout: float = 60.0, session=None):
        self.api = _Rest(url, token, timeout, session)
        self.root = self.api.root
        self.base = self.api.url + "vector-collections/"
        self.timeout, self.session = timeout, self.api.session

    def _call(self, method, path, body=None):
        return self.api.request(method, self.base + path, json=body)

    # -- collections -------------------------------------------------------------------
    def create_collection(self, name, dimension, metric="l2", index_type="flat", params=None,
                          pool=None, expected_count=0) -> dict:
        """Create a collection; `expected_count` lets the plane refuse one that won't fit."""
        body = {"name": name, "dimension": dimension, "metric": metric,
                "index_type": index_type, "params": params or {},
                "expected_count": expected_count}
        if pool:
            body["pool"] = pool
        return self._call("POST", "", body)

    def collection(self, name) -> dict:
        """The collection's row and engine statistics (`stats`: count, memory_bytes, ...)."""
        return self._call("GET", f"{name}/")

    def list_collections(self) -> list:
        return self._call("GET", "?limit=1000")["results"]

    def drop_collection(self, name) -> None:
        """Delete the collection with all its vectors and snapshots."""
        self._call("DELETE", f"{name}/")

    # -- vectors -----------------------------------------------------------------------
    def upsert(self, name, items, batch_size: int | None = None) -> int:
        """Insert or replace [{id, values, metadata}] in batches; returns the count.

        Each batch is acknowledged once it is in the collection's write-ahead log on disk.
        The default batch size keeps each request under the server's body limit
        (``REQUEST_BYTES``).
        """
        items = list(items)
        if not items:
            return 0
        batch_size = batch_size or _batch_for(len(_values(items[0]["values"])))
        done = 0
        for lo in range(0, len(items), batch_size):
            chunk = [{"id": it["id"], "values": _values(it["values"]),
                      "metadata": it.get("metadata")} for it in items[lo:lo + batch_size]]
            done += self._call("POST", f"{name}/vectors/", {"vectors": chunk})["upserted"]
        return done

    def get(self, name, vid) -> dict:
        """{id, values, metadata} of one vector (string ids must not contain '/')."""
        return self._call("GET", f"{name}/vectors/{requests.utils.quote(str(vid), safe='')}/")

    def delete(self, name, ids) -> int:
        """Delete vectors by id (unknown ids are ignored); returns how many were deleted."""
        if isinstance(ids, (str, int)):
            ids = [ids]
        return self._call("POST", f"{name}/delete-vectors/", {"ids": list(ids)})["deleted"]

    def search(self, name, vector, k=10, filter=None, nprobe=None, ef_search=None,
               include_metadata=True) -> list:
        """Top-k [{id, score, metadata}] for one query vector, best first."""
        body = self._search_body(k, filter, nprobe, ef_search, include_metadata)
        body["vector"] = _values(vector)
        return self._call("POST", f"{name}/search/", body)["results"]

    def search_batch(self, name, vectors, k=10, filter=None, nprobe=None, ef_search=None,
                     include_metadata=True, binary=True) -> list:
        """One result list per query vector (one filter for all).

        With ``binary`` (the default) the queries travel as base64 float32 rows
        (``vectors_b64``), about 4x smaller and much cheaper to parse than JSON numbers.
        """
        body = self._search_body(k, filter, nprobe, ef_search, include_metadata)
        if binary:
            mat = _f32(vectors)
            step = max(1, REQUEST_BYTES * 3 // 4 // (mat.shape[1] * 4))
            out = []
            for lo in range(0, len(mat), step):
                body["vectors_b64"] = _b64(mat[lo:lo + step])
                out += self._call("POST", f"{name}/search/", body)["results"]
            return out
        queries = [_values(v) for v in vectors]
        step = _batch_for(len(queries[0])) if queries else 1
        out = []
        for lo in range(0, len(queries), step):
            body["vectors"] = queries[lo:lo + step]
            out += self._call("POST", f"{name}/search/", body)["results"]
        return out

    def upsert_arrays(self, name, ids, vectors, metadata=None) -> int:
        """Upsert rows of a (n, d) array with their ids (and metadata list) in the compact
        base64 form; returns the count. Each request is acknowledged after the WAL fsync."""
        mat = _f32(vectors)
        ids = list(ids)
        if len(ids) != len(mat):
            raise ValueError(f"{len(ids)} ids for {len(mat)} vectors")
        step = max(1, REQUEST_BYTES * 3 // 4 // (mat.shape[1] * 4 + 64))
        done = 0
        for lo in range(0, len(mat), step):
            body = {"ids": ids[lo:lo + step], "vectors_b64": _b64(mat[lo:lo + step])}
            if metadata is not None:
                body["metadata"] = list(metadata[lo:lo + step])
            done += self._call("POST", f"{name}/vectors/", body)["upserted"]
        return done

    @staticmethod
    def _search_body(k, filter, nprobe, ef_search, include_metadata):
        body = {"k": k}
        if filter is not None:
            body["filter"] = filter
        if nprobe is not None:
            body["nprobe"] = nprobe
        if ef_search is not None:
            body["ef_search"] = ef_search
        if not include_metadata:
            body["include_metadata"] = False
        return body

    # -- builds and snapshots ----------------------------------------------------------
    def build(self, name, wait: bool = False, timeout: float = 3600.0) -> dict:
        """Train (IVF/PQ) or rebuild the index as a Job; with `wait`, until it finishes."""
        job = self._call("POST", f"{name}/build/")
        if not wait:
            return job
        return self.wait_job(job["job"], timeout)

    def wait_job(self, url: str, timeout: float = 3600.0) -> dict:
        """Poll a job URL until it finishes; raises VectorError if it failed or was
        cancelled (``code`` "job_failed" / "job_cancelled", status 409)."""
        try:
            return self.api.wait_job(url, timeout)
        except JobFailed as exc:
            raise VectorError(str(exc), exc.status, exc.body) from exc

    def snapshot(self, name, snapshot) -> dict:
        """Take a consistent snapshot of the collection."""
        return self._call("POST", f"{name}/snapshots/", {"name": snapshot})

    def restore(self, name, snapshot, new_name, pool=None) -> dict:
        """Create collection `new_name` from snapshot `snapshot` of `name`."""
        body = {"name": new_name, **({"pool": pool} if pool else {})}
        return self._call("POST", f"{name}/snapshots/{snapshot}/restore/", body)
