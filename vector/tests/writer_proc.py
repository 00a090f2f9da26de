"""Child process for the kill -9 test: writes from several threads, logs each op before and
after it is acknowledged ("B"/"A" lines on stdout), until it is killed."""

import json
import sys
import threading
import zlib

import numpy as np

from vector.engine import Collection, CollectionNotFound

DIM = 8


def vector_for(vid, version):
    """The deterministic vector stored for ``vid`` at ``version``."""
    seed = zlib.crc32(vid.encode()) * 10 + version
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def ops_for(thread):
    """The endless op sequence of one thread: (kind, [(id, version)])."""
    i = 0
    while True:
        batch = [(f"t{thread}-{i + j}", 1) for j in range(4)]
        yield "upsert", batch
        if i >= 8:
            yield "delete", [(f"t{thread}-{i - 8}", 0)]
            yield "upsert", [(f"t{thread}-{i - 7}", 2)]
        i += 4


def main(path, threads):
    try:
        coll = Collection.open(path, checkpoint_interval=0.05, checkpoint_wal_bytes=4096)
    except CollectionNotFound:
        coll = Collection.create(path, "durable", DIM, "l2", "hnsw", {"M": 8},
                                 checkpoint_interval=0.05, checkpoint_wal_bytes=4096)
    out = threading.Lock()

    def say(line):
        with out:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def run(t):
        for kind, items in ops_for(t):
            say(json.dumps(["B", t, kind, items]))
            if kind == "upsert":
                coll.upsert([{"id": vid, "values": vector_for(vid, ver).tolist(),
                              "metadata": {"v": ver}} for vid, ver in items])
            else:
                coll.delete([vid for vid, _ in items])
            say(json.dumps(["A", t, kind, items]))

    workers = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for w in workers:
        w.start()
    say(json.dumps(["READY"]))
    for w in workers:
        w.join()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
