"""Acknowledged writes survive kill -9; checkpoints, torn WAL tails, snapshots, locking."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from vector.engine import Collection, CollectionLocked, CollectionNotFound, VectorNotFound

from .writer_proc import DIM, vector_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _apply(state, kind, items):
    for vid, ver in items:
        if kind == "upsert":
            state[vid] = ver
        else:
            state.pop(vid, None)


def _run_and_kill(path, threads, acks_wanted):
    """Start the writer, let it acknowledge ``acks_wanted`` ops, kill -9 it; return its log."""
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, "-m", "vector.tests.writer_proc", path,
                             str(threads)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        acks = 0
        deadline = time.monotonic() + 60
        while acks < acks_wanted and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(json.loads(line))
            acks += lines[-1][0] == "A"
        os.kill(proc.pid, signal.SIGKILL)
        # Lines already written to the pipe before the kill are acknowledged too.
        rest = proc.stdout.read()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        err = proc.stderr.read()
        proc.stderr.close()
    for line in rest.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:   # a line cut by the kill
            pass
    assert acks >= acks_wanted, f"writer stopped early: {err[-2000:]}"
    return lines


def _check_after_crash(path, lines, threads, prior=None):
    """Every acknowledged op is there; at most the one in-flight op per thread is extra."""
    acked = {t: dict(prior[t]) if prior else {} for t in range(threads)}
    observed = {}
    inflight = {}
    for entry in lines:
        if entry[0] == "B":
            inflight[entry[1]] = (entry[2], entry[3])
        elif entry[0] == "A":
            _apply(acked[entry[1]], entry[2], entry[3])
            inflight.pop(entry[1], None)
    coll = Collection.open(path, checkpoint_interval=None)
    try:
        for t in range(threads):
            options = [acked[t]]
            if t in inflight:
                alt = dict(acked[t])
                _apply(alt, *inflight[t])
                options.append(alt)
            got = {}
            for vid in set().union(*options):
                try:
                    row = coll.get(vid)
                except VectorNotFound:
                    continue
                ver = row["metadata"]["v"]
                np.testing.assert_array_equal(np.float32(row["values"]), vector_for(vid, ver))
                got[vid] = ver
            assert got in options, f"thread {t}: state after kill -9 lost acknowledged writes"
            observed[t] = got
            # Search agrees with get: a stored vector finds itself.
            for vid, ver in list(got.items())[:5]:
                assert coll.search(vector_for(vid, ver), 1)[0]["id"] == vid
        return observed, len(coll)
    finally:
        coll.close(checkpoint=False)


def test_acknowledged_writes_survive_kill_9(tmpdir_path):
    path = os.path.join(tmpdir_path, "c")
    threads = 4
    lines = _run_and_kill(path, threads, 300)
    assert os.path.exists(os.path.join(path, "checkpoint.bin"))   # crashed mid-checkpointing
    recovered, count = _check_after_crash(path, lines, threads)
    assert count > 0
    # A second crash after recovery: replay over the recovered checkpoint + new WAL. The new
    # run restarts each thread's op sequence, so it rewrites ids over the recovered state.
    lines = _run_and_kill(path, threads, 150)
    _check_after_crash(path, lines, threads, prior=recovered)


def test_reopen_replays_wal_over_checkpoint(tmpdir_path):
    path = os.path.join(tmpdir_path, "c")
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((300, DIM)).astype(np.float32)
    coll = Collection.create(path, "wal", DIM, "l2", "ivf_flat", {"nlist": 4},
                             checkpoint_interval=None)
    coll.upsert_arrays(list(range(200)), rows[:200])
    coll.build_index()
    assert coll.checkpoint()
    coll.upsert_arrays(list(range(200, 300)), rows[200:])     # only in the WAL
    coll.delete([0, 1, 250])
    coll.close(checkpoint=False)
    coll = Collection.open(path, checkpoint_interval=None)
    try:
        assert len(coll) == 297 and coll.index_state == "ready"
        with pytest.raises(VectorNotFound):
            coll.get(250)
        np.testing.assert_array_equal(coll.get(299)["values"], rows[299])
        assert coll.search(rows[123], 1, nprobe=4)[0]["id"] == 123
    finally:
        coll.close()
    # After close's checkpoint the WAL holds nothing older than the checkpoint.
    coll = Collection.open(path, checkpoint_interval=None)
    assert len(coll) == 297
    coll.close()


def test_torn_wal_tail_is_cut_off(tmpdir_path):
    path = os.path.join(tmpdir_path, "c")
    coll = Collection.create(path, "torn", DIM, checkpoint_interval=None)
    coll.upsert([{"id": "x", "values": [1.0] * DIM}])
    coll.close(checkpoint=False)
    wal_dir = os.path.join(path, "wal")
    last = sorted(os.listdir(wal_dir))[-1]
    with open(os.path.join(wal_dir, last), "ab") as f:
        f.write(b"\x50\x00\x00\x00garbage-from-a-crash")
    coll = Collection.open(path, checkpoint_interval=None)
    try:
        assert coll.get("x")["values"] == [1.0] * DIM
        coll.upsert([{"id": "y", "values": [2.0] * DIM}])
    finally:
        coll.close(checkpoint=False)
    coll = Collection.open(path, checkpoint_interval=None)
    assert {len(coll), coll.get("y")["values"][0]} == {2, 2.0}
    coll.close()


def test_snapshot_is_a_consistent_copy(tmpdir_path):
    path = os.path.join(tmpdir_path, "c")
    snap = os.path.join(tmpdir_path, "snap")
    coll = Collection.create(path, "snap", DIM, "l2", "hnsw", checkpoint_interval=None)
    coll.upsert_arrays(["a", "b"], np.eye(DIM, dtype=np.float32)[:2], [{"k": 1}, {"k": 2}])
    coll.checkpoint()
    coll.upsert_arrays(["c"], np.eye(DIM, dtype=np.float32)[2:3])   # in the WAL only
    coll.snapshot(snap)
    coll.delete(["a"])
    coll.upsert_arrays(["d"], np.eye(DIM, dtype=np.float32)[3:4])
    restored = Collection.restore(snap, os.path.join(tmpdir_path, "r"), name="restored",
                                  checkpoint_interval=None)
    try:
        assert restored.spec.name == "restored"
        assert sorted(r["id"] for r in restored.search(np.ones(DIM), 10)) == ["a", "b", "c"]
        assert restored.get("b")["metadata"] == {"k": 2}
        assert sorted(r["id"] for r in coll.search(np.ones(DIM), 10)) == ["b", "c", "d"]
    finally:
        restored.close()
        coll.close()


def test_one_process_at_a_time(tmpdir_path):
    path = os.path.join(tmpdir_path, "c")
    coll = Collection.create(path, "locked", DIM, checkpoint_interval=None)
    try:
        with pytest.raises(CollectionLocked):
            Collection.open(path)
    finally:
        coll.close()
    with pytest.raises(CollectionNotFound):
        Collection.open(os.path.join(tmpdir_path, "nothing"))
