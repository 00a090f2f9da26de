"""Metadata filters give exactly the brute-force answer (on exact paths) or a subset of it."""

import numpy as np
import pytest

from .conftest import clustered

N, DIM = 6_000, 16
COLOURS = ["red", "green", "blue", "grey"]


def _meta(i):
    m = {"colour": COLOURS[i % 4], "price": (i * 37) % 1000 / 10.0, "n": i % 13}
    if i % 5 == 0:
        m["flag"] = i % 10 == 0
    return m


def _matches(meta, flt):
    """Reference semantics of a filter, written independently of the engine."""
    for field, cond in flt.items():
        if field not in meta:
            return False
        v = meta[field]
        if not isinstance(cond, dict):
            cond = {"eq": cond}
        for op, x in cond.items():
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            if op == "eq" and not (v == x and isinstance(v, bool) == isinstance(x, bool)):
                return False
            if op == "in" and not any(v == y and isinstance(v, bool) == isinstance(y, bool)
                                      for y in x):
                return False
            if op in ("gt", "gte", "lt", "lte") and not num:
                return False
            if (op == "gt" and not v > x) or (op == "gte" and not v >= x) or \
               (op == "lt" and not v < x) or (op == "lte" and not v <= x):
                return False
    return True


FILTERS = [
    {"colour": "red"},
    {"colour": {"in": ["green", "blue"]}},
    {"price": {"gte": 20, "lt": 45.5}},
    {"colour": "grey", "n": {"in": [1, 2, 3]}, "price": {"gt": 10}},
    {"flag": True},
    {"n": 1},          # an int never matches the boolean true
    {"colour": "purple"},
]


@pytest.fixture(scope="module")
def rows():
    return clustered(N + 20, DIM, clusters=20, seed=3)


def _brute(rows, metas, q, flt, k):
    ok = np.array([_matches(m, flt) for m in metas])
    idx = np.flatnonzero(ok)
    d = ((rows[idx] - q) ** 2).sum(1)
    return idx[np.argsort(d, kind="stable")[:k]].tolist(), idx


@pytest.mark.parametrize("index_type,params,brute_limit", [
    ("flat", None, 20_000),
    ("ivf_flat", {"nlist": 16}, 20_000),      # small match sets: exact scan of the matches
    ("ivf_flat", {"nlist": 16}, 0),           # faiss ID selector in the IVF index
    ("hnsw", {"M": 16}, 20_000),
])
def test_filters_equal_brute_force(manager, rows, index_type, params, brute_limit):
    base, queries = rows[:N], rows[N:]
    metas = [_meta(i) for i in range(N)]
    coll = manager.create("f", DIM, "l2", index_type, params)
    coll.brute_force_limit = brute_limit
    coll.upsert_arrays(list(range(N)), base, metas)
    if coll.index_state == "untrained":
        coll.build_index()
    for flt in FILTERS:
        for q in queries[:5]:
            expected, allowed = _brute(base, metas, q, flt, 10)
            got = coll.search(q, 10, filter=flt,
                              **({"nprobe": 16} if index_type == "ivf_flat" else {}))
            assert [r["id"] for r in got] == expected, flt
            assert all(_matches(r["metadata"], flt) for r in got)
            assert len(got) == min(10, len(allowed))


def test_hnsw_selector_path_returns_only_matches(manager, rows):
    base, queries = rows[:N], rows[N:]
    metas = [_meta(i) for i in range(N)]
    coll = manager.create("h", DIM, "l2", "hnsw", {"M": 16})
    coll.brute_force_limit = 0
    coll.upsert_arrays(list(range(N)), base, metas)
    flt = {"colour": {"in": ["red", "blue"]}, "price": {"lt": 60}}
    hits = 0
    for q in queries:
        expected, _ = _brute(base, metas, q, flt, 10)
        got = coll.search(q, 10, filter=flt, ef_search=128)
        assert all(_matches(r["metadata"], flt) for r in got)
        hits += len(set(expected) & {r["id"] for r in got})
    assert hits / (10 * len(queries)) >= 0.9


def test_filters_follow_updates_and_deletes(manager, rows):
    coll = manager.create("u", DIM, "l2", "hnsw")
    coll.upsert_arrays(["a", "b", "c"], rows[:3], [{"t": 1}, {"t": 2}, {"t": 1}])
    assert {r["id"] for r in coll.search(rows[0], 10, filter={"t": 1})} == {"a", "c"}
    coll.upsert([{"id": "a", "values": rows[0].tolist(), "metadata": {"t": 2}}])
    coll.delete(["c"])
    assert {r["id"] for r in coll.search(rows[0], 10, filter={"t": 2})} == {"a", "b"}
    assert coll.search(rows[0], 10, filter={"t": 1}) == []
    assert {r["id"] for r in coll.search(rows[0], 10)} == {"a", "b"}
