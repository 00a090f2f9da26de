"""The REST/SDK row of bench/vector.py: the same index served by a running Strata.

The engine-built collection is snapshotted and imported into the appliance
(``POST /api/v1/vector-collections/import/``, admin token; the appliance must run on this
machine so it can read the snapshot), so the web server searches the very same faiss index
the other rows use. Queries go through ``vector.sdk.VectorClient`` (requests, JSON).
"""
import json
import os
from pathlib import Path

import numpy as np

from vector.sdk import VectorClient


def strata_endpoint(url=None, token=None, data_dir=None):
    """(url, token) from arguments, or from ``<data_dir>/credentials.json`` of `strata up`."""
    if data_dir and not (url and token):
        creds = json.loads((Path(data_dir) / "credentials.json").read_text())
        url = url or creds["api_url"].split("/api/v1")[0]
        token = token or creds["token"]
    return url, token


class RestClient:
    """Strata over REST through the SDK (search answers with ids only, no metadata)."""

    name = "strata REST"

    def __init__(self, url, token, coll, index_type):
        self.client = VectorClient(url, token, timeout=600)
        self.collection = f"bench-{index_type.replace('_', '-')}-{os.getpid()}"
        snap = f"{coll.path}-snapshot"
        coll.checkpoint()
        coll.snapshot(snap)
        r = self.client.session.post(self.client.base + "import/",
                                     json={"name": self.collection, "path": snap},
                                     timeout=600)
        if r.status_code != 201:
            raise RuntimeError(f"import into Strata failed: {r.status_code} {r.text[:300]}")

    def search_batch(self, queries, k, knobs):
        res = self.client.search_batch(self.collection, queries, k, include_metadata=False,
                                       **knobs)
        return np.array([[h["id"] for h in row] + [-1] * (k - len(row)) for row in res])

    def search_one(self, query, k, knobs):
        return [h["id"] for h in self.client.search(self.collection, query, k,
                                                      include_metadata=False, **knobs)]

    def close(self):
        """Drop the imported collection from the appliance."""
        self.client.drop_collection(self.collection)
