"""End to end: kill -9 the web server (which serves the vector collections) during upserts;
once `strata up` has started it again, every acknowledged upsert is there (vector/README.md,
durability)."""
import os
import signal
import subprocess
import threading

import numpy as np

from tests.appliance import Appliance
from tests.kit import wait_for


def _web_pids(port: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"uvicorn console.asgi:application .*--port {port}( |$)"],
                         capture_output=True, text=True, check=False).stdout.split()
    return [int(p) for p in out]


def test_acknowledged_upserts_survive_kill_9_of_the_web_server(monkeypatch):
    from vector.sdk import VectorClient, VectorError

    monkeypatch.setenv("STRATA_DATAPLANE", "directory")   # no loop devices needed
    app = Appliance()
    try:
        app.start(timeout=240)
        client = VectorClient(app.url, app.credentials["token"], timeout=20)
        client.create_collection("dur", 16, metric="cosine", index_type="hnsw")
        rng = np.random.default_rng(0)
        acked, failed = [], threading.Event()

        def writer():
            n = 0
            while not failed.is_set():
                vecs = rng.standard_normal((50, 16)).astype(np.float32)
                try:
                    client.upsert_arrays("dur", range(n, n + 50), vecs,
                                         metadata=[{"n": i} for i in range(n, n + 50)])
                except (VectorError, OSError):  # the server died under us: stop writing
                    failed.set()
                    return
                acked.extend(range(n, n + 50))
                n += 50

        t = threading.Thread(target=writer)
        t.start()
        wait_for(lambda: len(acked) >= 1000 or failed.is_set(), 60, "1000 acknowledged upserts",
                 interval=0.05)
        pids = _web_pids(app.port)
        assert pids, "no web server process found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        t.join(60)
        assert failed.is_set() and len(acked) >= 1000
        # strata up starts the web server again after a back-off; the new process loads the
        # collection from disk: every acknowledged upsert must be there
        stats = wait_for(lambda: client.collection("dur")["stats"], 180,
                         "the restarted web server to serve the collection", interval=0.5,
                         ignore=(VectorError, OSError), until=lambda s: s is not None)
        assert app.proc.poll() is None, "strata up stopped instead of restarting the web server"
        assert stats["count"] >= len(acked)          # + at most the batch in flight
        assert stats["count"] <= len(acked) + 50
        for vid in acked[:20] + acked[-50:]:
            assert client.get("dur", vid)["metadata"] == {"n": vid}
    finally:
        app.destroy()
