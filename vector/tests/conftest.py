"""Shared helpers for the vector engine tests: clustered data and exact ground truth."""

import shutil
import tempfile

import numpy as np
import pytest

from vector.engine import CollectionManager


def clustered(n, dim, clusters=50, seed=7, spread=0.35):
    """``n`` float32 vectors drawn around ``clusters`` random centres (fixed seed)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32) * 2.0
    labels = rng.integers(0, clusters, n)
    return (centres[labels] + rng.standard_normal((n, dim)).astype(np.float32) * spread
            ).astype(np.float32)


def exact_topk(data, queries, k, metric="l2"):
    """Exact top-k row indices by brute force (numpy), best first."""
    if metric == "l2":
        d2 = ((queries ** 2).sum(1)[:, None] - 2 * queries @ data.T + (data ** 2).sum(1)[None])
        return np.argsort(d2, axis=1)[:, :k]
    if metric == "cosine":
        data = data / np.linalg.norm(data, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    return np.argsort(-(queries @ data.T), axis=1)[:, :k]


def recall_at_k(results, truth):
    """Mean fraction of the true top-k ids found in each result list."""
    hits = 0
    for res, true in zip(results, truth):
        hits += len({r["id"] for r in res} & set(true.tolist()))
    return hits / truth.size


@pytest.fixture
def tmpdir_path():
    """A private temporary directory (removed afterwards)."""
    path = tempfile.mkdtemp(prefix="strata-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def manager(tmpdir_path):
    """A CollectionManager on a temporary root; closes every collection afterwards."""
    mgr = CollectionManager(tmpdir_path, checkpoint_interval=None)
    yield mgr
    mgr.close()
