"""End to end: kill -9 the web server (which serves the vector collections) during upserts;
after `strata up` again, every acknowledged upsert is there (vector/README.md, durability)."""
import os
import signal
import subprocess
import threading
import time

import numpy as np

from tests.appliance import Appliance


def _web_pids(port: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", f"uvicorn console.asgi:application .*--port {port}"],
                         capture_output=True, text=True, check=False).stdout.split()
    return [int(p) for p in out]


def test_acknowledged_upserts_survive_kill_9_of_the_web_server(monkeypatch):
    from vector.sdk import VectorClient, VectorError

    monkeypatch.setenv("STRATA_DATAPLANE", "directory")   # no loop devices needed
    app = Appliance()
    apps = [app]
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
        deadline = time.monotonic() + 60
        while len(acked) < 1000 and time.monotonic() < deadline and not failed.is_set():
            time.sleep(0.05)
        pids = _web_pids(app.port)
        assert pids, "no web server process found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        t.join(60)
        assert failed.is_set() and len(acked) >= 1000
        app.proc.wait(timeout=90)   # strata up stops the rest when the web server dies

        again = Appliance(data_dir=app.data_dir, port=app.port)
        apps.append(again)
        again.start(timeout=240)
        client = VectorClient(again.url, again.credentials["token"], timeout=20)
        stats = client.collection("dur")["stats"]
        assert stats["count"] >= len(acked)          # + at most the batch in flight
        assert stats["count"] <= len(acked) + 50
        for vid in acked[:20] + acked[-50:]:
            assert client.get("dur", vid)["metadata"] == {"n": vid}
    finally:
        for a in apps[:-1]:   # same data directory as the last one: just make sure it stopped
            if a.proc and a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait()
        apps[-1].destroy()
