"""Memory is reported, estimated and enforced; HNSW rebuilds reclaim deleted rows."""

import pytest

from vector.engine import CollectionManager, MemoryBudgetExceeded, estimate_memory

from .conftest import clustered

DIM = 32


def test_estimates_grow_with_count_and_match_reports(manager):
    for index_type in ("flat", "ivf_flat", "ivf_pq", "hnsw"):
        small = estimate_memory(DIM, 1000, index_type, None)
        big = estimate_memory(DIM, 100_000, index_type, None)
        assert 0 < small < big
    assert estimate_memory(DIM, 100_000, "ivf_pq", {"m": 8}) < \
        estimate_memory(DIM, 100_000, "hnsw", None)
    coll = manager.create("mem", DIM, "l2", "hnsw")
    before = coll.memory_bytes()
    rows = clustered(5000, DIM)
    coll.upsert_arrays(list(range(5000)), rows, [{"i": i} for i in range(5000)])
    used = coll.memory_bytes()
    assert used > before + rows.nbytes
    est = estimate_memory(DIM, 5000, "hnsw", None)
    assert 0.5 * est < used < 3 * est
    assert coll.stats()["memory_bytes"] == used


def test_collection_that_would_not_fit_is_refused(tmpdir_path):
    mgr = CollectionManager(tmpdir_path, memory_budget=8 << 20, checkpoint_interval=None)
    try:
        with pytest.raises(MemoryBudgetExceeded, match="budget"):
            mgr.create("huge", 128, "l2", "hnsw", expected_count=1_000_000)
        assert mgr.list() == []
        coll = mgr.create("fits", DIM, "l2", "flat", expected_count=1000)
        rows = clustered(30_000, DIM)
        coll.upsert_arrays(list(range(1000)), rows[:1000])
        with pytest.raises(MemoryBudgetExceeded, match="adding 29000 vectors") as info:
            coll.upsert_arrays(list(range(1000, 30_000)), rows[1000:])
        assert "free" in str(info.value)
        assert len(coll) == 1000          # the refused batch was not written
    finally:
        mgr.close()


def test_hnsw_rebuild_reclaims_deleted_rows(manager):
    coll = manager.create("reclaim", DIM, "l2", "hnsw", {"M": 16})
    rows = clustered(4000, DIM, seed=4)
    coll.upsert_arrays(list(range(4000)), rows)
    coll.delete(list(range(0, 4000, 2)))
    assert coll.stats()["dead_in_index"] == 2000
    assert all(r["id"] % 2 for r in coll.search(rows[0], 10))
    coll.build_index()
    assert coll.stats()["dead_in_index"] == 0 and coll.faiss_index.ntotal == 2000
    assert coll.search(rows[1], 1)[0]["id"] == 1
    coll.upsert_arrays([0], rows[:1])      # reuses a reclaimed slot
    assert coll.search(rows[0], 1)[0]["id"] == 0
    assert len(coll) == 2001
