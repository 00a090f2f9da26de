"""Concurrent upserts, deletes, searches and index builds from threads."""

import threading

import numpy as np

from vector.engine import BuildCancelled, BuildInProgress

from .conftest import clustered, exact_topk, recall_at_k

DIM = 16


def test_concurrent_upserts_and_searches(manager):
    coll = manager.create("conc", DIM, "l2", "hnsw", {"M": 16})
    rows = clustered(8 * 400, DIM, seed=5)
    errors = []
    stop = threading.Event()

    def writer(t):
        try:
            for b in range(0, 400, 20):
                lo = t * 400 + b
                ids = [f"w{t}-{i}" for i in range(lo, lo + 20)]
                coll.upsert_arrays(ids, rows[lo:lo + 20], [{"t": t}] * 20)
                if b % 100 == 0:
                    coll.delete([ids[0]])
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    def reader():
        try:
            while not stop.is_set():
                res = coll.search_batch(rows[:8], 5)
                assert all(len(r) <= 5 for r in res)
                if len(coll):
                    coll.search(rows[0], 3, filter={"t": {"in": [0, 1]}})
        except Exception as exc:
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(3)]
    writers = [threading.Thread(target=writer, args=(t,)) for t in range(8)]
    for th in readers + writers:
        th.start()
    for th in writers:
        th.join()
    stop.set()
    for th in readers:
        th.join()
    assert not errors, errors
    assert len(coll) == 8 * 400 - 8 * 4
    for t in range(8):
        lo = t * 400 + 50
        assert coll.search(rows[lo], 1)[0]["id"] == f"w{t}-{lo}"
    stats = coll.stats()
    # Group commit: concurrent writers shared fsyncs.
    assert stats["wal_fsyncs"] < stats["wal_records"]


def test_build_while_writing_and_searching(manager):
    rows = clustered(12_000, DIM, seed=9)
    coll = manager.create("swap", DIM, "l2", "ivf_flat", {"nlist": 32})
    coll.upsert_arrays(list(range(8000)), rows[:8000])
    seen = []
    during = {}

    def progress(pct, message):
        seen.append(pct)
        if pct >= 50 and not during:
            # Mid-build: the old (exact) index still answers, writes still land.
            during["res"] = coll.search(rows[10], 1)
            coll.upsert_arrays(list(range(8000, 12_000)), rows[8000:])
            coll.delete([10, 11])
            coll.upsert_arrays([12], rows[13:14])

    coll.build_index(progress=progress)
    assert during["res"][0]["id"] == 10
    assert seen == sorted(seen) and seen[-1] == 100
    assert coll.index_state == "ready" and len(coll) == 11_998
    truth = exact_topk(np.delete(rows, [10, 11, 12], axis=0), rows[100:150], 10)
    ids = np.delete(np.arange(12_000), [10, 11, 12])
    res = coll.search_batch(rows[100:150], 10, nprobe=32)
    res = [[r for r in rr if r["id"] != 12] for rr in res]
    assert recall_at_k(res, ids[truth]) >= 0.95
    assert coll.search(rows[11], 1, nprobe=32)[0]["id"] != 11
    assert coll.search(rows[13], 2, nprobe=32)[0]["id"] in (12, 13)
    assert coll.search(rows[9000], 1, nprobe=32)[0]["id"] == 9000


def test_cancelled_build_keeps_old_index(manager):
    rows = clustered(3000, DIM, seed=2)
    coll = manager.create("cancel", DIM, "l2", "ivf_pq", {"nlist": 16, "m": 4})
    coll.upsert_arrays(list(range(3000)), rows)
    try:
        coll.build_index(cancel=lambda: True)
    except BuildCancelled as exc:
        assert "previous index" in str(exc)
    else:
        raise AssertionError("build was not cancelled")
    assert coll.index_state == "untrained"
    assert coll.search(rows[7], 1)[0]["id"] == 7

    started, release = threading.Event(), threading.Event()

    def slow_progress(pct, msg):
        started.set()
        release.wait(10)

    th = threading.Thread(target=coll.build_index, kwargs={"progress": slow_progress})
    th.start()
    started.wait(10)
    try:
        coll.build_index()
    except BuildInProgress:
        pass
    else:
        raise AssertionError("second build was allowed")
    finally:
        release.set()
        th.join()
    assert coll.index_state == "ready"


def test_hnsw_rebuild_keeps_writes_made_during_it(manager):
    rows = clustered(3000, DIM, seed=12)
    coll = manager.create("hswap", DIM, "l2", "hnsw", {"M": 16})
    coll.upsert_arrays(list(range(2000)), rows[:2000])
    coll.delete(list(range(0, 100)))           # dead nodes the rebuild reclaims
    done = []

    def progress(pct, message):
        if pct >= 50 and not done:
            done.append(pct)
            coll.upsert_arrays(list(range(2000, 3000)), rows[2000:])   # new rows
            coll.upsert_arrays([500], rows[2999:3000])                 # overwrite
            coll.delete([600])

    coll.build_index(progress=progress)
    assert done and len(coll) == 2999 - 100 + 1 - 1
    assert coll.search(rows[2500], 1)[0]["id"] == 2500
    assert coll.search(rows[600], 1)[0]["id"] != 600
    assert {r["id"] for r in coll.search(rows[2999], 2)} == {500, 2999}
    assert coll.search(rows[50], 1)[0]["id"] >= 100
    assert coll.stats()["dead_in_index"] == 2     # the overwritten and the deleted row
